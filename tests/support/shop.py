"""The shop's tools of the return_direct tests: an order lookup that ends the agent's run, and
a warranty reader that does not."""

from __future__ import annotations

from langchain_core.tools import tool

PHOTO_ASK = "Is the parcel in this photo damaged? Use check_warranty to see if it is covered."


@tool(return_direct=True)
def lookup_order(number: str) -> str:
    """Looks an order up in the shop's database."""
    return f"Order {number}: shipped on Monday from the north warehouse. " + "Tracking. " * 30


@tool
def check_warranty(product: str) -> str:
    """Reads the warranty terms of a product."""
    return "Warranty: dents are covered for two years. " + "clause " * 40
