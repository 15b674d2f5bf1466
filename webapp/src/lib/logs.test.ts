import { describe, expect, it } from "vitest";
import type { Client, StreamNodeLogsResponse } from "../api/generated";
import { ApiError } from "../api/errors";
import { appendLine, defaultLogService, firstRetryMs, logServices, maxRetryMs, retryable, streamLogs } from "./logs";

describe("log services", () => {
  it("shows kubelet first when the node runs it, else its first service, else the kernel log", () => {
    expect(defaultLogService(["apid", "kubelet"])).toBe("kubelet");
    expect(defaultLogService(["apid", "etcd"])).toBe("apid");
    expect(defaultLogService([])).toBe("kernel");
  });
  it("always offers the kernel log, once", () => {
    expect(logServices(["apid"])).toEqual(["apid", "kernel"]);
    expect(logServices(["kernel", "apid"])).toEqual(["kernel", "apid"]);
    expect(logServices([])).toEqual(["kernel"]);
  });
  it("keeps the last lines only", () => {
    expect(appendLine(["a", "b"], "c", 3)).toEqual(["a", "b", "c"]);
    expect(appendLine(["a", "b", "c"], "d", 3)).toEqual(["b", "c", "d"]);
    expect(appendLine(["a", "b"], "c", 1)).toEqual(["c"]);
    const big = Array.from({ length: 2000 }, (_, i) => String(i));
    const next = appendLine(big, "x");
    expect(next.length).toBe(2000);
    expect(next[0]).toBe("1");
    expect(next[1999]).toBe("x");
  });
  it("retries a failed stream, but not one the backend lacks or forbids", () => {
    expect(retryable(new Error("connection reset"))).toBe(true);
    expect(retryable(new ApiError(503, { code: 14, message: "unavailable" }, "x"))).toBe(true);
    expect(retryable(new ApiError(501, undefined, "x"))).toBe(false);
    expect(retryable(new ApiError(403, undefined, "x"))).toBe(false);
    expect(retryable("not an error")).toBe(false);
  });
});

type Req = Parameters<Client["streamNodeLogs"]>[0];

/** A client whose streams play the given scripts, one per call, recording the requests. */
function streams(scripts: ((on: (l: StreamNodeLogsResponse) => void) => Promise<void>)[]) {
  const reqs: Req[] = [];
  const client = {
    streamNodeLogs: (req: Req, on: (l: StreamNodeLogsResponse) => void) => {
      reqs.push(req);
      const s = scripts[reqs.length - 1];
      return s ? s(on) : Promise.reject(new ApiError(501, undefined, "no more scripts"));
    },
  };
  return { client, reqs };
}

describe("streamLogs", () => {
  it("resumes after the last line's token, waiting longer after each failure and from the start again after a line", async () => {
    const { client, reqs } = streams([
      async (on) => {
        on({ line: "one", resumeToken: "t1" });
        on({ line: "two", resumeToken: "t2" });
        throw new Error("reset");
      },
      async () => {
        throw new Error("reset again");
      },
      async (on) => {
        on({ line: "three", resumeToken: "" });
      },
    ]);
    const seen: string[][] = [];
    const errors: unknown[] = [];
    const waits: number[] = [];
    await streamLogs(client, { name: "cp-1", service: "kubelet", tailLines: 200, follow: true }, (l) => seen.push(l), (e) => errors.push(e), new AbortController().signal, async (ms) => {
      waits.push(ms);
    });
    expect(reqs.map((r) => r.resumeToken)).toEqual([undefined, "t2", "t2", "t2"]);
    expect(reqs[0]).toMatchObject({ name: "cp-1", service: "kubelet", tailLines: 200, follow: true });
    expect(seen.at(-1)).toEqual(["one", "two", "three"]);
    // reset → 1 s; reset again → 2 s; the line resets the wait, the stream ends → 1 s; the 501 ends it.
    expect(waits).toEqual([firstRetryMs, 2 * firstRetryMs, firstRetryMs]);
    expect(errors.map((e) => (e as Error).message)).toEqual(["reset", "reset again", "no more scripts"]);
  });
  it("caps the wait between attempts", async () => {
    const fail = async () => {
      throw new Error("down");
    };
    const { client } = streams(Array(8).fill(fail));
    const waits: number[] = [];
    await streamLogs(client, { name: "w-1", service: "apid", tailLines: 10, follow: true }, () => {}, () => {}, new AbortController().signal, async (ms) => {
      waits.push(ms);
    });
    expect(waits).toEqual([1000, 2000, 4000, 8000, maxRetryMs, maxRetryMs, maxRetryMs, maxRetryMs]);
  });
  it("reads once when not following", async () => {
    const { client, reqs } = streams([async (on) => on({ line: "only" }), async (on) => on({ line: "never" })]);
    const seen: string[][] = [];
    await streamLogs(client, { name: "w-1", service: "apid", tailLines: 10, follow: false }, (l) => seen.push(l), () => {}, new AbortController().signal, async () => {});
    expect(reqs.length).toBe(1);
    expect(seen).toEqual([["only"]]);
  });
  it("stops without an error when aborted", async () => {
    const ac = new AbortController();
    const { client, reqs } = streams([
      async () => {
        ac.abort();
        throw new Error("aborted");
      },
    ]);
    const errors: unknown[] = [];
    await streamLogs(client, { name: "w-1", service: "apid", tailLines: 10, follow: true }, () => {}, (e) => errors.push(e), ac.signal, async () => {});
    expect(reqs.length).toBe(1);
    expect(errors).toEqual([]);
  });
});
