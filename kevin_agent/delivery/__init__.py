"""Delivering a run: the plan (what would be written and committed, and what is refused) and
carrying it out (``plan``, ``deliver``), the kernel module (``kernel_module``), git (``gitops``),
the report (``report/``); and for kernels extracted from a model, putting them back into the model
(``install``) and timing the whole model with and without them (``e2e``)."""

from .deliver import Delivery, deliver
from .plan import (
           DeliveryPlan,
           commit_message,
           plan_delivery,
           refusals_ahead,
           shown_path,
           target_paths,
)

__all__ = ["Delivery", "DeliveryPlan", "commit_message", "deliver", "plan_delivery", "refusals_ahead",
           "shown_path", "target_paths"]
