"""Widgets shared by the run and history screens."""

from .chart import SpeedupChart
from .feedback import FeedbackView
from .output import ModelOutput
from .turn_list import TurnList

__all__ = ["FeedbackView", "ModelOutput", "SpeedupChart", "TurnList"]
