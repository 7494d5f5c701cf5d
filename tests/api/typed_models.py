"""Models of the typed-argument tests, at module level as users define them (annotations are
resolved against the module: a class local to a test function would not be found)."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Literal, TypedDict

import pydantic


class Line(pydantic.BaseModel):
    sku: str
    qty: int


class Order(pydantic.BaseModel):
    id: int
    lines: list[Line]
    placed: datetime | None = None


@dataclasses.dataclass
class Point:
    x: float
    y: float
    label: str = ""


@dataclasses.dataclass
class Route:
    points: list[Point]
    mode: Literal["car", "bike"] = "car"


class Tag(TypedDict):
    name: str
    weight: int
