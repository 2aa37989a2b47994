"""The explorer in a real browser: the system's headless Chromium, driven by selenium
through the system chromedriver (never a downloaded browser). Opens the served page and
an exported file, checks that every view renders with no console error, hovers a token
and checks that the highlighted lines change, and saves screenshots."""

import contextlib
import os
import shutil
import threading
import time

import pytest

from attnlab.viz.explorer import explorer_html, load_source
from attnlab.viz.explorer.server import make_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        webdriver = None
    if webdriver is None or not CHROMIUM or not CHROMEDRIVER:
        reason = "needs selenium and the system's chromium + chromium-driver (scripts/setup.sh test)"
        if os.environ.get("CI"):
            pytest.fail(reason + " (CI is set: the set-up installs them)")
        pytest.skip(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1300,1000", "--disable-extensions", "--no-first-run"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@contextlib.contextmanager
def _served(model_dir):
    """The explorer for ``model_dir`` on a free port of 127.0.0.1; yields its URL."""
    server = make_server(load_source(model_dir), "127.0.0.1", 0, quiet=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _wait(driver, script, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.05)
    shown = driver.execute_script("return document.getElementById('status').textContent")
    raise AssertionError(f"timed out waiting for: {script}; the page's status line: {shown!r}")


def _console_errors(driver):
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def _check_views(driver, tmp_path, prefix, expect_groups):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    _wait(driver, "return document.getElementById('attnlab').dataset.rendered === 'head'")
    groups = [b.text for b in driver.find_elements(By.CSS_SELECTOR, "#groups button")]
    assert groups == expect_groups
    canvas = driver.find_element(By.ID, "head-canvas")
    all_lines = int(canvas.get_attribute("data-lines"))
    assert all_lines > 0
    picture = canvas.screenshot_as_png
    tokens = driver.find_elements(By.CSS_SELECTOR, "#tokens-q .tok")
    assert len(tokens) >= 5 and len(driver.find_elements(By.CSS_SELECTOR, "#heads input")) >= 4
    ActionChains(driver).move_to_element(tokens[3]).perform()
    _wait(driver, "return document.getElementById('head-canvas').dataset.focus === 'q3'")
    focused = int(canvas.get_attribute("data-lines"))
    assert 0 < focused < all_lines  # only the hovered token's lines are left
    assert "focus" in tokens[3].get_attribute("class")
    assert canvas.screenshot_as_png != picture  # and the drawing changed with them
    driver.save_screenshot(str(tmp_path / f"{prefix}-head.png"))
    # a head switched off removes its lines
    ActionChains(driver).move_to_element(driver.find_element(By.ID, "description")).perform()
    _wait(driver, "return document.getElementById('head-canvas').dataset.focus === ''")
    driver.find_element(By.CSS_SELECTOR, "#heads input[data-head='0']").click()
    _wait(driver, f"return Number(document.getElementById('head-canvas').dataset.lines) < {all_lines}")

    driver.find_element(By.ID, "tab-model").click()
    _wait(driver, "return document.getElementById('attnlab').dataset.rendered === 'model'")
    thumbnails = driver.find_elements(By.CSS_SELECTOR, "#model-grid canvas")
    layers = len(driver.find_elements(By.CSS_SELECTOR, "#layer option"))
    assert len(thumbnails) == layers * len(driver.find_elements(By.CSS_SELECTOR, "#heads input"))
    driver.save_screenshot(str(tmp_path / f"{prefix}-model.png"))
    thumbnails[-1].click()  # click to enlarge: the last layer's last head in the matrix view
    _wait(driver, "return document.getElementById('attnlab').dataset.rendered === 'matrix'")
    assert driver.find_element(By.ID, "matrix-title").text.startswith(f"{expect_groups[0]} attention, layer {layers}")
    matrix = driver.find_element(By.ID, "matrix-canvas")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", matrix)
    # selenium's offsets count from the element's centre: just right of and below it is a cell
    ActionChains(driver).move_to_element_with_offset(matrix, 8, 8).perform()
    _wait(driver, "return document.getElementById('matrix-value').textContent.includes('→ key')")
    driver.save_screenshot(str(tmp_path / f"{prefix}-matrix.png"))

    driver.find_element(By.ID, "tab-summary").click()
    _wait(driver, "return document.getElementById('attnlab').dataset.rendered === 'summary'")
    assert len(driver.find_elements(By.CSS_SELECTOR, "#entropy-table td")) == len(thumbnails)
    driver.find_element(By.ID, "pair-go").click()
    _wait(driver, "return document.querySelectorAll('#pair-results li').length > 0")
    assert _console_errors(driver) == []


def test_served_page(browser, minilm_dir, tmp_path):
    with _served(minilm_dir) as url:
        browser.get(url)
        # the seeds' sentence is preloaded and analysed on opening
        _wait(browser, "return document.getElementById('text').value.startsWith('The animal')")
        _check_views(browser, tmp_path, "served", ["self"])
        # a new text through the form
        browser.execute_script("document.getElementById('text').value = 'A short new sentence.'")
        browser.find_element("id", "analyse").click()
        _wait(browser, "return document.querySelectorAll('#pair-q option').length === 7")
        browser.execute_script("document.getElementById('text').value = ''")
        browser.find_element("id", "analyse").click()
        _wait(browser, "return document.getElementById('status').className === 'error'")
        assert "empty" in browser.find_element("id", "status").text
        # the browser logs the 400 answer itself, and nothing else
        assert [e["message"] for e in _console_errors(browser) if "400 (Bad Request)" not in e["message"]] == []


def test_exported_file(browser, translation_dir, tmp_path):
    page = tmp_path / "translation.html"
    page.write_text(explorer_html(translation_dir, "ein mann liest ein buch"), encoding="utf-8")
    browser.get(page.as_uri())
    _check_views(browser, tmp_path, "file", ["encoder self", "decoder self", "cross"])
    browser.find_element("css selector", "#groups button[data-group='cross']").click()
    _wait(browser, "return document.getElementById('attnlab').dataset.rendered === 'summary'"
                   " && document.querySelector('#groups .on').dataset.group === 'cross'")
    assert _console_errors(browser) == []


def test_language_model_streams_its_continuation(browser, lm_dir):
    with _served(lm_dir) as url:
        browser.get(url)
        _wait(browser, "return document.getElementById('attnlab').dataset.rendered === 'head'")
        prompt_tokens = len(browser.find_elements("css selector", "#tokens-q .tok"))
        browser.execute_script("document.getElementById('generate').value = 4")
        browser.find_element("id", "analyse").click()
        _wait(browser, "return document.getElementById('attnlab').dataset.generated === '4'", timeout=60)
        # one drawing per new token, each with one more query than the last
        drawn = browser.execute_script("return window.attnlab.drawn")
        assert drawn == [prompt_tokens + k for k in (1, 2, 3, 4)]
        assert len(browser.find_elements("css selector", "#tokens-q .tok")) == prompt_tokens + 4
        assert browser.find_element("id", "output").text.startswith("model output: ")
        assert _console_errors(browser) == []


def _image_canvas(driver):
    return driver.execute_script("const c = document.getElementById('image-canvas');"
                                 "return [c.dataset.query, c.toDataURL()];")


def test_vit_attention_is_drawn_over_the_image(browser, vit_dir, tmp_path):
    """Served: the ViT's example digit is analysed on opening, the image panel shows the
    class token's attention over the patch grid, and another query redraws it; a file
    upload goes through the same page (as a data URI)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    with _served(vit_dir) as url:
        browser.get(url)
        _wait(browser, "return document.getElementById('attnlab').dataset.rendered === 'head'"
                       " && document.getElementById('image-canvas').dataset.query === '0'")
        assert browser.find_element(By.ID, "image-panel").is_displayed()
        assert browser.find_element(By.ID, "image-box").is_displayed()
        canvas = browser.find_element(By.ID, "image-canvas")
        assert (int(canvas.get_attribute("width")), int(canvas.get_attribute("height"))) == (308, 308)
        first = _image_canvas(browser)
        Select(browser.find_element(By.ID, "image-query")).select_by_value("6")  # patch (1,1)
        _wait(browser, "return document.getElementById('image-canvas').dataset.query === '6'")
        assert _image_canvas(browser)[1] != first[1]  # the overlay changed with the query
        # hovering a query token in the head view shows that query over the image
        from selenium.webdriver.common.action_chains import ActionChains

        ActionChains(browser).move_to_element(browser.find_elements(By.CSS_SELECTOR, "#tokens-q .tok")[3]).perform()
        _wait(browser, "return document.getElementById('image-canvas').dataset.query === '3'")
        browser.save_screenshot(str(tmp_path / "vit-image.png"))
        # an image of the user's own: read in the browser, posted as a data URI
        digit = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "digits", "2.png")
        browser.find_element(By.ID, "image-file").send_keys(os.path.abspath(digit))
        _wait(browser, "return document.getElementById('text').value.startsWith('data:image/')"
                       " && window.attnlab.ov.text === 'an uploaded image'"
                       " && document.getElementById('attnlab').dataset.rendered === 'head'")
        assert _console_errors(browser) == []


def test_exported_captioner_file_draws_cross_attention(browser, captioner_dir, tmp_path):
    scene = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "scenes", "scene-0.png")
    page = tmp_path / "caption.html"
    page.write_text(explorer_html(captioner_dir, os.path.abspath(scene)), encoding="utf-8")
    browser.get(page.as_uri())
    _wait(browser, "return document.getElementById('attnlab').dataset.rendered === 'head'")
    assert browser.find_element("id", "image-panel").is_displayed()  # image encoder self: patches over the image
    browser.find_element("css selector", "#groups button[data-group='decoder self']").click()
    _wait(browser, "return document.getElementById('image-panel').style.display === 'none'")
    browser.find_element("css selector", "#groups button[data-group='cross']").click()
    _wait(browser, "return document.getElementById('image-panel').style.display === ''"
                   " && document.getElementById('image-query').options.length > 0")
    assert _console_errors(browser) == []
