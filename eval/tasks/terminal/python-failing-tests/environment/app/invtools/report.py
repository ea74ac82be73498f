"""Inventory levels from movements."""


def levels(movements):
    """Net quantity per SKU, as a dict sorted by SKU."""
    out = {}
    for m in movements:
        out[m.sku] = out.get(m.sku, 0) + m.qty
    return dict(sorted(out.items()))


def low_stock(movements, threshold=10):
    """SKUs whose level is below threshold, lowest level first (ties by SKU)."""
    lv = levels(movements)
    low = [(sku, q) for sku, q in lv.items() if q < threshold]
    return [sku for sku, _ in sorted(low, key=lambda x: x.qty)]
