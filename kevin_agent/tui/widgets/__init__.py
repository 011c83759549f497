"""Widgets shared by the run and history screens."""

from .chart import SpeedupChart
from .code import CodePane, CodeView
from .feedback import FeedbackView
from .header import FitHeader
from .output import ModelOutput
from .turn_list import TurnList

__all__ = ["CodePane", "CodeView", "FeedbackView", "FitHeader", "ModelOutput", "SpeedupChart", "TurnList"]
