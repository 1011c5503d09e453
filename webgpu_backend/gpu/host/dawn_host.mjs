// The node host of the `dawn` WebGPU implementation (webgpu_backend/gpu/dawn.py): Dawn from the
// pinned npm package `webgpu`, driven by webgpu_host.mjs (shared with the browser page).
//
// Usage: node dawn_host.mjs <node_modules dir> <answer fd>
// Frames, both ways: u32 LE length, that many bytes of JSON, u32 LE length, that many bytes of
// blob. Requests arrive on stdin, answers leave on the answer fd (a pipe the client passes):
// Dawn and the Vulkan driver print warnings on stdout and stderr, which must not end up inside
// a frame.
// The first request is {"open": {"adapter": name | null}} (answered with the adapter's facts, or
// {"unavailable": why}) or {"adapters": true} (answered with {"adapters": [name, ...]}, Dawn's
// Vulkan adapters, most preferred first); then batches {"cmds": [...]} (webgpu_host.mjs);
// {"exit": true} or the end of stdin ends the process (the device would keep node alive).

import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { decodeFrame, encodeFrame, openHost } from "./webgpu_host.mjs";

// The one pinned version, in versions.json beside this file (scripts/setup.sh installs it).
const WEBGPU_VERSION = JSON.parse(fs.readFileSync(new URL("./versions.json", import.meta.url), "utf8")).webgpu;

const ANSWER_FD = Number(process.argv[3]);
console.log = console.error;

function send(answer, blob) {
  const frame = encodeFrame(answer, blob);
  for (let at = 0; at < frame.length; ) at += fs.writeSync(ANSWER_FD, frame, at);
}

// Dawn's module (create, globals), or the reason it cannot load.
async function loadDawn(modulesDir) {
  const packageDir = path.join(modulesDir ?? "", "webgpu");
  let installed = null;
  try {
    installed = JSON.parse(fs.readFileSync(path.join(packageDir, "package.json"), "utf8")).version;
  } catch {
    return `the npm package webgpu is not installed in ${modulesDir}`;
  }
  if (installed !== WEBGPU_VERSION) {
    return `webgpu ${installed} is installed in ${modulesDir}, ${WEBGPU_VERSION} is pinned`;
  }
  try {
    const dawn = await import(pathToFileURL(path.join(packageDir, "index.js")).href);
    Object.assign(globalThis, dawn.globals); // GPUBufferUsage, GPUMapMode, ... as in a page
    return dawn;
  } catch (err) {
    return `the npm package webgpu ${installed} does not load: ${err.message}`;
  }
}

// Dawn's adapters, most preferred first. WebGPU cannot enumerate adapters; dawn.node lists them
// in the error of a request for a name no adapter has (its README documents this).
async function listAdapters(dawn) {
  try {
    await dawn.create(["adapter=\u0001"]).requestAdapter({ powerPreference: "high-performance" });
  } catch (err) {
    return [...String(err.message).matchAll(/^ \* backend: '([^']*)', name: '(.*)'$/gm)]
      .filter((m) => m[1] === "vulkan")
      .map((m) => m[2]);
  }
  return [];
}

async function answerFirst(request, dawn) {
  if (typeof dawn === "string") return [{ unavailable: dawn }, null];
  if (request.adapters) return [{ adapters: await listAdapters(dawn) }, null];
  const name = request.open?.adapter;
  // Keep the GPU object referenced for the process's life: dawn.node frees its instance with it.
  globalThis.dawnGpu = dawn.create(name ? [`adapter=${name}`] : []);
  try {
    host = await openHost(globalThis.dawnGpu);
  } catch (err) {
    return [{ unavailable: String(err?.message ?? err) }, null];
  }
  return [{ facts: host.facts(), node: process.versions.node, webgpu: WEBGPU_VERSION }, null];
}

let host = null;
const dawnLoaded = loadDawn(process.argv[2]);

// Frames are handled one at a time, in order: a batch may depend on the objects of the last.
let pending = Buffer.alloc(0);
let chain = Promise.resolve();

process.stdin.on("data", (chunk) => {
  pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
  for (let frame = decodeFrame(pending); frame; frame = decodeFrame(pending)) {
    const [request, blob, end] = frame;
    pending = pending.subarray(end);
    chain = chain.then(async () => {
      if (request.exit) process.exit(0);
      const [answer, data] = host
        ? await host.handle(request.cmds, blob)
        : await answerFirst(request, await dawnLoaded);
      send(answer, data);
    });
  }
});
// The client ended (closed, or died however): nobody is left to answer, even mid-batch.
process.stdin.on("end", () => process.exit(0));
