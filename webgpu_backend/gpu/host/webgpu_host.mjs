// The WebGPU side of webgpu_backend/gpu/remote.py: one module for the node host (dawn_host.mjs,
// Dawn from the npm package `webgpu`) and the browser page (chrome_host.html), so that both
// implementations run the same calls and differ only in the WebGPU underneath.
//
// A batch is a list of commands plus one binary blob (the bytes of its buffer writes). The
// client chooses every object's id, so creating objects and writing buffers need no answer:
// it queues them and sends them with the next command that does need one (createPipeline or
// run), always the batch's last. Errors come back through error scopes: those of the queued
// commands with that answer, those of createPipeline apart (they are the kernel's build error).
// A lost device answers every later batch with `lost`.

// The error filters every scope covers: popErrorScope returns the first error of its filter.
const FILTERS = ["validation", "out-of-memory", "internal"];

const BUFFER_TYPES = { storage_rw: "storage", storage_ro: "read-only-storage", uniform: "uniform" };

// maxStorageBufferBindingSize -> max-storage-buffer-binding-size (the seam's names, as wgpu-py's).
const dashed = (name) => name.replace(/(\d+)D$/, "-$1d").replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

// The limits the device requests at the adapter's maximum, so that benchmark-sized weights fit
// in one binding (as webgpu_backend/device.py requests them from wgpu).
const RAISED_LIMITS = ["maxBufferSize", "maxStorageBufferBindingSize"];

// Frames, both ways (remote.py's encode_frame): u32 LE length, JSON, u32 LE length, blob.
export function encodeFrame(message, blob) {
  const json = new TextEncoder().encode(JSON.stringify(message));
  const data = blob ?? new Uint8Array(0);
  const frame = new Uint8Array(8 + json.length + data.length);
  const view = new DataView(frame.buffer);
  view.setUint32(0, json.length, true);
  frame.set(json, 4);
  view.setUint32(4 + json.length, data.length, true);
  frame.set(data, 8 + json.length);
  return frame;
}

/** [message, blob, length] of the frame `bytes` (a Uint8Array) begins with, or null until whole. */
export function decodeFrame(bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.length < 4) return null;
  const jsonEnd = 4 + view.getUint32(0, true);
  if (bytes.length < jsonEnd + 4) return null;
  const end = jsonEnd + 4 + view.getUint32(jsonEnd, true);
  if (bytes.length < end) return null;
  const message = JSON.parse(new TextDecoder().decode(bytes.subarray(4, jsonEnd)));
  return [message, bytes.subarray(jsonEnd + 4, end), end];
}

/**
 * Open the adapter and device of `gpu` (node: `create([...])` of npm `webgpu`; page:
 * `navigator.gpu`). Resolves to a Host, or rejects with an Error saying why none opened.
 */
export async function openHost(gpu) {
  const adapter = await gpu.requestAdapter({ powerPreference: "high-performance" });
  if (!adapter) throw new Error("requestAdapter() found no adapter");
  const requiredFeatures = adapter.features.has("shader-f16") ? ["shader-f16"] : [];
  const requiredLimits = {};
  for (const name of RAISED_LIMITS) requiredLimits[name] = adapter.limits[name];
  const device = await adapter.requestDevice({ requiredFeatures, requiredLimits });
  return new Host(adapter, device);
}

export class Host {
  constructor(adapter, device) {
    this.adapter = adapter;
    this.device = device;
    this.objects = new Map(); // id -> GPUBuffer | {bgl, pl} | GPUComputePipeline | GPUBindGroup
    this.modules = new Map(); // sha256 of the WGSL source -> GPUShaderModule
    this.lost = null;
    device.lost.then((info) => {
      this.lost = `device lost (${info.reason}): ${info.message}`;
    });
  }

  /** Adapter facts for the client: info, limits by dashed name, features. */
  facts() {
    const info = {};
    for (const key of ["vendor", "architecture", "device", "description"]) info[key] = this.adapter.info[key] ?? "";
    const limits = {};
    // The device's limits (what the runtime may use), not the adapter's.
    for (const key in this.device.limits) limits[dashed(key)] = this.device.limits[key];
    return { info, limits, features: [...this.device.features].sort() };
  }

  /** Run one batch; resolves to [answer, blob] (blob: Uint8Array or null). */
  async handle(cmds, blob) {
    if (this.lost) return [{ lost: this.lost }, null];
    const last = cmds.length && ["createPipeline", "compile", "run"].includes(cmds.at(-1).op) ? cmds.at(-1) : null;
    const queued = last ? cmds.slice(0, -1) : cmds;
    // A step's own errors and those of the objects queued before it are one DeviceError to the
    // client, so one set of scopes covers both; a pipeline's errors are its build error.
    const scope = this.push();
    const errors = [];
    for (const cmd of queued) this.call(() => this.execute(cmd, blob), errors);
    let result = {};
    let data = null;
    if (last?.op === "run") {
      let mapped = null;
      this.call(() => (mapped = this.run(last)), errors);
      // The map's failure is caught at once: left for later, it would count as an unhandled
      // rejection while the scopes are popped (which ends node).
      const reading = (mapped ?? Promise.resolve(null)).then(
        (bytes) => [bytes, null],
        (err) => [null, err],
      );
      const [popped, [bytes, failed]] = await Promise.all([this.pop(scope), reading]);
      errors.push(...popped);
      if (failed) errors.push(`read-back: ${failed.message ?? failed}`);
      data = bytes;
    } else {
      errors.push(...(await this.pop(scope)));
      if (last) result = await this.createPipeline(last);
    }
    if (this.lost) return [{ lost: this.lost, errors }, null];
    return [{ errors, ...result }, data];
  }

  push() {
    for (const filter of FILTERS) this.device.pushErrorScope(filter);
    return FILTERS.length;
  }

  async pop(count) {
    const popped = [];
    for (let i = 0; i < count; i++) popped.push(this.device.popErrorScope());
    return (await Promise.all(popped)).filter((e) => e).map((e) => e.message);
  }

  // An exception (a TypeError for a malformed descriptor, an unknown id) is reported like a
  // validation error rather than ending the batch: the client raises it at this round trip.
  call(fn, errors) {
    try {
      fn();
    } catch (err) {
      errors.push(String(err?.message ?? err));
    }
  }

  get(id) {
    const object = this.objects.get(id);
    if (object === undefined) throw new Error(`no object with id ${id}`);
    return object;
  }

  execute(cmd, blob) {
    const d = this.device;
    switch (cmd.op) {
      case "createBuffer": {
        const U = GPUBufferUsage;
        const usage = {
          storage: U.STORAGE | U.COPY_SRC | U.COPY_DST,
          uniform: U.UNIFORM | U.COPY_DST,
          readback: U.MAP_READ | U.COPY_DST,
        }[cmd.usage];
        this.objects.set(cmd.id, d.createBuffer({ label: cmd.label, size: cmd.size, usage }));
        break;
      }
      case "release": // destroyBuffer, or an object the client no longer references
        for (const id of cmd.ids) {
          this.objects.get(id)?.destroy?.();
          this.objects.delete(id);
        }
        break;
      case "createLayout": {
        const bgl = d.createBindGroupLayout({
          entries: cmd.entries.map(([binding, kind]) => ({
            binding,
            visibility: GPUShaderStage.COMPUTE,
            buffer: { type: BUFFER_TYPES[kind] },
          })),
        });
        this.objects.set(cmd.id, { bgl, pl: d.createPipelineLayout({ bindGroupLayouts: [bgl] }) });
        break;
      }
      case "createBindGroup":
        this.objects.set(
          cmd.id,
          d.createBindGroup({
            layout: this.get(cmd.layout).bgl,
            entries: cmd.entries.map(([binding, buffer, offset, size]) => ({
              binding,
              resource: { buffer: this.get(buffer), offset, size },
            })),
          }),
        );
        break;
      case "writeBuffer":
        d.queue.writeBuffer(this.get(cmd.buffer), cmd.offset, blob, cmd.at, cmd.size);
        break;
      default:
        throw new Error(`unknown command ${JSON.stringify(cmd.op)}`);
    }
  }

  // The shader module (cached by source digest: pipelines of one kernel with other constants or
  // layouts share it), its compilation messages, then the pipeline (none for `compile`, which
  // asks only for the compiler's verdict). Answers {build: text} with every message, each
  // `path:line:col`, when the compiler or the pipeline's validation refused.
  async createPipeline(cmd) {
    const d = this.device;
    let module = this.modules.get(cmd.digest);
    const fresh = module === undefined;
    const scope = this.push();
    const errors = [];
    this.call(() => {
      if (fresh) module = d.createShaderModule({ label: cmd.kernel, code: cmd.source });
      if (cmd.op === "compile") return;
      const pipeline = d.createComputePipeline({
        label: cmd.kernel,
        layout: this.get(cmd.layout).pl,
        compute: { module, entryPoint: cmd.entry, constants: cmd.constants },
      });
      this.objects.set(cmd.id, pipeline);
    }, errors);
    errors.push(...(await this.pop(scope)));
    // A cached module compiled cleanly; asking a module for its messages again could wait
    // forever in Chrome 156 (seen: the promise of a second getCompilationInfo never settled).
    const messages = fresh && module ? (await module.getCompilationInfo()).messages : [];
    const compiled = !messages.some((m) => m.type === "error");
    if (fresh && module && compiled) this.modules.set(cmd.digest, module);
    if (!errors.length && compiled) return {};
    this.objects.delete(cmd.id);
    const lines = messages.map((m) => `${cmd.path}:${m.lineNum}:${m.linePos} ${m.type}: ${m.message}`);
    return { build: [...lines, ...errors].join("\n") };
  }

  // One compute pass (pipeline and bind group set only when they change), then the copies, one
  // submit (after every queued write), and the read-back's map. Returns the promise of the
  // first `nbytes` of the read-back buffer, or null when nothing is read.
  run(cmd) {
    const d = this.device;
    const encoder = d.createCommandEncoder();
    const pass = encoder.beginComputePass();
    let pipeline = null;
    let group = null;
    for (const [p, g, x, y, z] of cmd.launches) {
      if (p !== pipeline) pass.setPipeline(this.get((pipeline = p)));
      if (g !== group) pass.setBindGroup(0, this.get((group = g)));
      pass.dispatchWorkgroups(x, y, z);
    }
    pass.end();
    for (const [src, srcOffset, dst, dstOffset, size] of cmd.copies) {
      encoder.copyBufferToBuffer(this.get(src), srcOffset, this.get(dst), dstOffset, size);
    }
    d.queue.submit([encoder.finish()]);
    if (!cmd.nbytes) return null;
    const readback = this.get(cmd.readback);
    // mapAsync wants a size that is a multiple of 4.
    const size = Math.min(readback.size, Math.ceil(cmd.nbytes / 4) * 4);
    return readback.mapAsync(GPUMapMode.READ, 0, size).then(() => {
      const bytes = new Uint8Array(readback.getMappedRange(0, size).slice(0, cmd.nbytes));
      readback.unmap();
      return bytes;
    });
  }
}
