"""The console's transactions page, in a real browser against a real server: open transactions, age, partitions."""

from __future__ import annotations

from collections.abc import Callable

from playwright.sync_api import Page, expect

from tests.integration.transactions.test_transactions_api import create, end, init, produce
from tests.support.server import Server
from tests.system.console.test_console import _cells, _open, _shot, browser, page

__all__ = ["browser", "page"]  # the browser and page fixtures of the console's tests


def test_transactions_page_shows_open_transactions_with_age_and_partitions(
    page: Page, server: Callable[..., Server]
) -> None:
    srv = server()
    c = srv.client()
    create(c, "orders", partitions=3)
    create(c, "audit")
    epoch = init(c, "pay-1", transaction_timeout_ms=60_000)
    records = [{"value": "a", "partition": 0}, {"value": "b", "partition": 2}]
    assert produce(c, "orders", records, "pay-1", epoch).status_code == 200
    assert produce(c, "audit", [{"value": "c"}], "pay-1", epoch).status_code == 200
    done = init(c, "done-1")
    assert produce(c, "audit", [{"value": "d"}], "done-1", done).status_code == 200
    assert end(c, "done-1", "commit", done).status_code == 200

    _open(page, srv, "/transactions")
    rows = page.locator("[data-testid=transactions] tbody tr")
    expect(rows).to_have_count(1)  # the committed one is not open
    cells = _cells(page, "tr[data-tid='pay-1']")
    assert cells[:2] == ["pay-1", "Ongoing"] and cells[3] == str(epoch)
    assert cells[4].endswith(" s") and cells[5] == "1 min 0 s"
    assert cells[6] == "audit [0]; orders [0, 2]"
    expect(page.locator("[data-nav=transactions]")).to_have_class("active")
    _shot(page, "transactions")

    assert end(c, "pay-1", "abort", epoch).status_code == 200
    expect(rows).to_have_count(0)  # the next refresh
    expect(page.locator("[data-testid=no-transactions]")).to_be_visible()
