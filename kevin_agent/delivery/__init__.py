"""Delivering a run: the plan (what would be written and committed, and what is refused), and
carrying it out."""

from .deliver import Delivery, deliver
from .plan import DeliveryPlan, commit_message, plan_delivery, refusals_ahead, shown_path, target_paths

__all__ = ["Delivery", "DeliveryPlan", "commit_message", "deliver", "plan_delivery", "refusals_ahead",
           "shown_path", "target_paths"]
