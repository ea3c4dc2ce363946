// The chat page at / in headless Chromium (Debian `chromium`, driven by playwright-core):
// type a message, send it, and watch the streamed answer grow and finish.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { chromium } from "playwright-core";
import { startServer } from "./helpers.mjs";

const CHROMIUM = process.env.HEARTH_CHROMIUM || "/usr/bin/chromium";

test("the chat page streams an answer", { timeout: 120000 }, async () => {
  assert.ok(existsSync(CHROMIUM), `chromium not found at ${CHROMIUM} (Debian: apt-get install chromium)`);
  const srv = await startServer(["--parallel", "2", "--ctx-size", "512", "-t", "2"]);
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions"],
  });
  try {
    const page = await browser.newPage();
    const pageErrors = [];
    page.on("pageerror", (e) => pageErrors.push(String(e)));
    await page.goto(srv.base + "/", { timeout: 30000 });
    await page.waitForFunction(() => document.getElementById("model").textContent !== "…", null, { timeout: 10000 });
    assert.match(await page.textContent("#model"), /kjv/i);
    // Record every length the answer passes through, to see it arrive in pieces.
    await page.evaluate(() => {
      window.lengths = [];
      new MutationObserver(() => {
        const t = document.querySelector(".msg.assistant .text");
        if (t) window.lengths.push(t.textContent.length);
      }).observe(document.getElementById("log"), { subtree: true, childList: true, characterData: true });
    });
    await page.fill("#max-tokens", "40");
    await page.fill("#input", "Who was the king of Israel?");
    await page.click("#send");
    await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 60000 });
    const answer = await page.textContent(".msg.assistant .text");
    assert.ok(answer.length > 10, `answer: '${answer}'`);
    assert.ok(!answer.includes("Error:"), answer);
    const lengths = await page.evaluate(() => window.lengths);
    assert.ok(new Set(lengths.filter((n) => n > 0)).size >= 3, `not streamed: ${lengths}`);
    assert.match(await page.textContent("#stats"), /tokens in/);
    assert.deepEqual(pageErrors, []);
  } finally {
    await browser.close();
    await srv.stop();
  }
});
