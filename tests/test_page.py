"""The page in a real headless browser (the system's Chromium, driven by Playwright): type a
sentence with a [MASK], and the candidates, the tokens and the attention view appear."""

import shutil

import pytest
from conftest import serving

playwright_api = pytest.importorskip("playwright.sync_api")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

from bertforge.serve.app import create_app  # noqa: E402
from bertforge.serve.engine import Engine  # noqa: E402

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


@pytest.fixture
def service(models):
    """The service for the masked LM, on a free local port."""
    with serving(create_app(Engine(models["mlm"]))) as url:
        yield url


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (apt-get install chromium; .ci/run installs it)")
def test_typing_a_masked_sentence_shows_candidates_tokens_and_attention(service, tmp_path):
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(service)
            page.wait_for_selector("#info:has-text('answers')")
            page.fill("#text", "truly [MASK] acting")
            page.fill("#pair", "")
            page.click("#run")
            page.wait_for_selector("#fill:not([hidden]) table.candidates tr")
            assert page.locator("#fill table.candidates tr").count() == 5  # top 5 for the one mask
            tokens = page.locator("#tokens-body .token").all_inner_texts()
            assert tokens[0] == "[CLS]" and "[MASK]" in tokens and tokens[-1] == "[SEP]"
            assert page.locator("#attention-svg text.token-from").count() == len(tokens)
            assert page.locator("#attention-svg line.edge").count() > 0
            assert page.locator("#layer option").count() == 2 and page.locator("#head option").count() == 5
            page.select_option("#head", "1")  # one head: every token's weights add up to one
            shown = page.locator("#attention-svg line.edge").count()
            page.hover("#attention-svg text.token-from >> nth=1")  # one token's lines only
            assert 0 < page.locator("#attention-svg line.edge").count() <= min(shown, len(tokens))
            page.fill("#text", "no mask here")
            page.click("#run")
            page.wait_for_selector("#tokens:not([hidden])")
            assert page.locator("#fill").is_hidden()
            page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
            assert (tmp_path / "page.png").stat().st_size > 10_000
            assert not errors, errors
        finally:
            browser.close()
