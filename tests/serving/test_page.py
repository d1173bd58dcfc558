"""The page at / in a real headless browser (Debian's chromium through Selenium): type a sentence, get the
output the API gives, and see the cross-attention heat map drawn (a screenshot of the canvas that is not blank).
Skipped, saying why, where no browser or driver is installed."""

import io
import shutil

import pytest
from server_kit import Served, call, tiny_model_dir

pytest.importorskip("fastapi")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the test extra has it)")
BROWSER, DRIVER = shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (BROWSER and DRIVER), reason="no chromium and chromedriver (apt-get install chromium chromium-driver)"
)


@pytest.fixture
def browser():
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = BROWSER
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,1400"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


def test_typing_a_sentence_shows_the_output_and_draws_the_heat_map(tmp_path, browser):
    from PIL import Image
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    served = Served(tiny_model_dir(tmp_path / "t5"))
    try:
        browser.get(served.url + "/")
        sentence = "A man in a blue shirt rides a bike."
        browser.find_element(By.ID, "source").send_keys(sentence)
        browser.find_element(By.ID, "max_new_tokens").clear()
        browser.find_element(By.ID, "max_new_tokens").send_keys("12")
        browser.find_element(By.ID, "go").click()
        wait = WebDriverWait(browser, 60)
        wait.until(lambda b: b.find_element(By.ID, "layer").find_elements(By.TAG_NAME, "option"))
        shown = browser.find_element(By.ID, "output").text
        parameters = {"max_new_tokens": 12, "num_beams": 4}  # the page's default, as the README shows it
        _, answer, _ = call(served.url + "/generate", {"inputs": sentence, "parameters": parameters})
        assert shown == answer["generated_text"].strip() and browser.find_element(By.ID, "error").text == ""
        canvas = browser.find_element(By.ID, "map")
        assert int(canvas.get_attribute("width")) > 100 and int(canvas.get_attribute("height")) > 100
        image = Image.open(io.BytesIO(canvas.screenshot_as_png)).convert("RGB")
        colours = image.getcolors(maxcolors=1 << 20)
        assert len(colours) > 20, "the heat map canvas is blank"  # white, text, and shades of the map
        blues = sum(count for count, (r, g, b) in colours if b > 200 and r < 200)
        assert blues > 500  # attention cells are drawn in shades of blue
        heads = browser.find_element(By.ID, "head").find_elements(By.TAG_NAME, "option")
        assert [h.text for h in heads][:2] == ["mean", "0"]
        heads[1].click()  # one head: redrawn, still a map
        assert len(Image.open(io.BytesIO(canvas.screenshot_as_png)).convert("RGB").getcolors(1 << 20)) > 20
        browser.save_screenshot(str(tmp_path / "page.png"))
    finally:
        served.stop()
