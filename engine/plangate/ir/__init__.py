"""The typed model (pydantic) of plans and policies, and the lowering from syntax trees."""
