// Opens the live map in Debian's chromium, driven by puppeteer-core (pinned in tools/node),
// and tells what the page does. Usage:
//   node live_map.mjs <chromium> <map url> <drone id> <tools/node dir>
// The drones are drawn on a canvas: what it shows is read from the page's `fleetMap` hooks.
// Prints JSON lines: {"drawn": [x, y]} once the drone's dot is drawn (pixels in the map);
// then, for each line read on standard input:
//   "moved": {"moved": [x, y]} as soon as the dot stands somewhere else;
//   "drones": {"drones": [{id, state, fill, x, y}, ...]}, every dot drawn;
//   "crossings": {"crossings": [[drone, enter|leave, fence], ...], "fences": [...]}, the
//     crossings the page lists (newest first) and the ids of the fences it drew;
//   "tiles": once the base map has loaded, {"tiles": {view, attribution, resources}}: the
//     view (zoom, west, south, east, north), the attribution shown, and the URL of every
//     resource the page loaded (performance.getEntries);
//   "perf <drones> <moves>": {"perf": {drawMs, movesMs, drawn}}, the time to draw that many
//     drones and then to apply that many moves, each until the frame that shows them;
//   "click <drone>": clicks the drone's dot; once its details show,
//     {"clicked": {"detail": id shown, "track": whether its track is drawn,
//                  "trackPoints", "trackPages": the positions and pages it read}};
//   "query <x> <y>": clicks the map there; {"query": the radius query's answer line};
//   "drag <drone> <drone>": drags with Shift held from one dot to the other;
//     {"query": the radius query's answer line};
//   "end": {"requests": [...], "urls": [...]}, the path of every request the page made to
//     /api/, and the URL of every request at all, and exits.
import { createRequire } from "node:module";
import readline from "node:readline";

const [chromium, url, drone, nodeDir] = process.argv.slice(2);
const require = createRequire(`${nodeDir}/package.json`);
const puppeteer = require("puppeteer-core");
const print = value => process.stdout.write(JSON.stringify(value) + "\n");
const WAIT = { timeout: 60000, polling: 50 };

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
  const requests = [], urls = [];
  page.on("request", r => {
    urls.push(r.url());
    const path = new URL(r.url()).pathname;
    if (path.startsWith("/api/")) requests.push(path);
  });
  await page.goto(url, { waitUntil: "domcontentloaded" });
  const find = (drone) => {
    const d = window.fleetMap && window.fleetMap.drones().find(d => d.id === drone);
    return d ? [d.x, d.y] : null;
  };
  await page.waitForFunction(find, WAIT, drone);
  let at = await page.evaluate(find, drone);
  print({ drawn: at });
  for await (const line of readline.createInterface({ input: process.stdin })) {
    const [command, ...args] = line.split(" ");
    if (command === "end") break;
    if (command === "crossings") {
      print(await page.evaluate(() => ({
        crossings: [...document.querySelectorAll("#crossings tr")]
          .map(tr => [...tr.cells].slice(1).map(td => td.textContent)),
        fences: [...document.querySelectorAll("[data-fence-id]")].map(f => f.dataset.fenceId),
      })));
    } else if (command === "drones") {
      print({ drones: await page.evaluate(() => window.fleetMap.drones()) });
    } else if (command === "tiles") {
      await page.waitForFunction(() => document.body.dataset.tilesLoaded, WAIT);
      print({ tiles: await page.evaluate(() => ({
        view: window.fleetMap.view(),
        attribution: document.querySelector(".leaflet-control-attribution").textContent,
        resources: performance.getEntriesByType("resource").map(e => e.name),
      })) });
    } else if (command === "click") {
      const [x, y] = await page.evaluate(find, args[0]);
      await page.mouse.click(x, y);
      await page.waitForFunction(id => {
        const cell = document.querySelector("#detail td.n");
        return cell && cell.textContent === id && document.querySelector("path.track");
      }, WAIT, args[0]);
      print({ clicked: await page.evaluate(() => ({
        detail: document.querySelector("#detail td.n").textContent,
        track: !!document.querySelector("path.track"),
        trackPoints: Number(document.querySelector("#detail").dataset.trackPoints),
        trackPages: Number(document.querySelector("#detail").dataset.trackPages),
      })) });
    } else if (command === "query" || command === "drag") {
      const before = await page.evaluate(() => document.querySelector("#result").textContent);
      if (command === "query") {
        await page.mouse.click(Number(args[0]), Number(args[1]));
      } else {
        const [[x0, y0], [x1, y1]] = [await page.evaluate(find, args[0]), await page.evaluate(find, args[1])];
        await page.keyboard.down("Shift");
        await page.mouse.move(x0, y0);
        await page.mouse.down();
        await page.mouse.move(x1, y1, { steps: 10 });
        await page.mouse.up();
        await page.keyboard.up("Shift");
      }
      await page.waitForFunction(before => {
        const head = document.querySelector("#result div");
        return head && head.textContent !== before;
      }, WAIT, before);
      print({ query: await page.evaluate(() => document.querySelector("#result div").textContent) });
    } else if (command === "perf") {
      print({ perf: await page.evaluate(perf, Number(args[0]), Number(args[1])) });
    } else if (command === "moved") {
      await page.waitForFunction(
        (drone, [x, y]) => {
          const d = window.fleetMap.drones().find(d => d.id === drone);
          return d && (d.x !== x || d.y !== y);
        },
        WAIT, drone, at,
      );
      at = await page.evaluate(find, drone);
      print({ moved: at });
    } else {
      throw new Error(`unknown command ${line}`);
    }
  }
  print({ requests, urls });
} finally {
  await browser.close();
}

// In the page: `drones` drones scattered over the view, drawn; then `moves` of them moved a
// little; each timed from the call until the frame after the one that draws it.
async function perf(drones, moves) {
  const frame = () => new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
  const v = window.fleetMap.view();
  const feature = (i, shift) => ({
    type: "Feature", id: `perf-${i}`,
    geometry: { type: "Point", coordinates: [
      v.west + (v.east - v.west) * ((i * 7919 % drones) / drones) + shift,
      v.south + (v.north - v.south) * ((i * 104729 % drones) / drones),
    ] },
    properties: { deviceId: `perf-${i}`, ageS: i % 400 },
  });
  const fleet = Array.from({ length: drones }, (_, i) => feature(i, 0));
  await frame();
  let t0 = performance.now();
  window.fleetMap.setFleet(fleet);
  await frame();
  const drawMs = performance.now() - t0;
  const step = (v.east - v.west) / 500;
  t0 = performance.now();
  for (let i = 0; i < moves; i++) window.fleetMap.move(feature((i * 5) % drones, step));
  await frame();
  const movesMs = performance.now() - t0;
  return { drawMs, movesMs, drawn: window.fleetMap.drones().length };
}
