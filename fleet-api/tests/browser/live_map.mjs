// Opens the live map in Debian's chromium, driven by puppeteer-core (pinned in tools/node),
// and tells what the page does. Usage:
//   node live_map.mjs <chromium> <map url> <drone id> <tools/node dir>
// Prints JSON lines: {"drawn": [cx, cy]} once the drone's dot is drawn; then, for each line
// "moved" read on standard input, {"moved": [cx, cy]} as soon as the dot stands somewhere
// else; for "crossings", {"crossings": [[drone, enter|leave, fence], ...], "fences": [...]},
// the crossings the page lists (newest first) and the ids of the fences it drew; on "end",
// {"requests": [...]}, the path of every request the page made to /api/, and exits.
import { createRequire } from "node:module";
import readline from "node:readline";

const [chromium, url, drone, nodeDir] = process.argv.slice(2);
const require = createRequire(`${nodeDir}/package.json`);
const puppeteer = require("puppeteer-core");
const print = value => process.stdout.write(JSON.stringify(value) + "\n");

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--mute-audio",
  ],
});
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 800 });
  const requests = [];
  page.on("request", r => {
    const path = new URL(r.url()).pathname;
    if (path.startsWith("/api/")) requests.push(path);
  });
  await page.goto(url, { waitUntil: "domcontentloaded" });
  const dot = `[data-drone-id="${drone}"]`;
  const where = () => page.$eval(dot, c => [c.getAttribute("cx"), c.getAttribute("cy")]);
  await page.waitForSelector(dot, { timeout: 60000 });
  let at = await where();
  print({ drawn: at });
  for await (const line of readline.createInterface({ input: process.stdin })) {
    if (line === "end") break;
    if (line === "crossings") {
      print(await page.evaluate(() => ({
        crossings: [...document.querySelectorAll("#crossings tr")]
          .map(tr => [...tr.cells].slice(1).map(td => td.textContent)),
        fences: [...document.querySelectorAll("[data-fence-id]")].map(f => f.dataset.fenceId),
      })));
      continue;
    }
    if (line !== "moved") throw new Error(`unknown command ${line}`);
    await page.waitForFunction(
      (dot, [x, y]) => {
        const c = document.querySelector(dot);
        return c && (c.getAttribute("cx") !== x || c.getAttribute("cy") !== y);
      },
      { timeout: 60000, polling: "mutation" },
      dot,
      at,
    );
    at = await where();
    print({ moved: at });
  }
  print({ requests });
} finally {
  await browser.close();
}
