"""Sign up 200 products for a sale: one job per product, one batch, a report at the end.

A product that breaks a business rule (no stock, price above the sale's ceiling) is refused
with ``Fail``: the batch shows it as *failed* with the reason, and it is never retried. A call
to the (simulated) marketplace that times out is an *error*: retried with backoff.

Run it::

    conveyor worker app:app -q sale -c 10 &
    python -c "import app; print(app.sign_up_all(sale_id=1))"
    conveyor batch show <printed batch id>
"""

from __future__ import annotations

import random

from conveyor import Conveyor, Fail, current_job

app = Conveyor()

PRICE_CEILING = 500


@app.job(queue="sale", retry=5)
def sign_up(sale_id: int, product: dict[str, int]) -> dict[str, int]:
    """Enrol one product in a sale, or say why not."""
    ctx = current_job()
    if product["stock"] <= 0:
        raise Fail(f"product {product['id']}: no stock")
    if product["price"] > PRICE_CEILING:
        price = product["price"]
        raise Fail(f"product {product['id']}: price {price} above ceiling {PRICE_CEILING}")
    if random.random() < 0.05 and ctx.attempt == 1:
        raise TimeoutError("marketplace did not answer in 5 s")
    ctx.log(f"product {product['id']} enrolled in sale {sale_id}")
    return {"product": product["id"], "sale": sale_id}


@app.job(queue="sale")
def sale_report(batch_id: str) -> dict[str, int]:
    """`on_complete` callback: how many products made it, how many were refused."""
    counts = app.batch_status(batch_id)["counts"]
    current_job().log(f"{counts['succeeded']} enrolled, {counts['failed']} refused")
    return {"enrolled": counts["succeeded"], "refused": counts["failed"]}


def sign_up_all(sale_id: int, count: int = 200) -> str:
    """Hand 200 products to the workers as one batch; returns the batch id at once."""
    rng = random.Random(sale_id)
    products = [
        {"id": i, "stock": rng.choice([0, 5, 10, 20]), "price": rng.randint(10, 600)}
        for i in range(1, count + 1)
    ]
    with app.batch(description=f"sign up {count} products for sale {sale_id}",
                   on_complete=sale_report, meta={"sale_id": sale_id}) as batch:
        sign_up.enqueue_many([(sale_id, p) for p in products])
    return batch.id
