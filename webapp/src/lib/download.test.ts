import { afterEach, describe, expect, it, vi } from "vitest";
import { ApiError } from "../api/errors";
import { captureProblem, captureQuery, downloadPath, fetchDownloader, filenameOf } from "./download";

afterEach(() => vi.unstubAllGlobals());

describe("captureProblem", () => {
  it("accepts a link and a bounded duration", () => {
    expect(captureProblem({ iface: "enp0s1", seconds: 10 })).toBe("");
  });
  it("names what is wrong and the way out", () => {
    expect(captureProblem({ iface: "", seconds: 10 })).toMatch(/Name the link/);
    expect(captureProblem({ iface: "a/b", seconds: 10 })).toMatch(/not a network interface name/);
    expect(captureProblem({ iface: "eth0", seconds: 3600 })).toMatch(/1 to 300 seconds/);
    expect(captureProblem({ iface: "eth0", seconds: 0 })).toMatch(/1 to 300 seconds/);
    expect(captureProblem({ iface: "eth0", seconds: 10, snapLen: 8 })).toMatch(/64 to 65535 bytes/);
  });
});

describe("downloads", () => {
  it("builds the route and the capture's query", () => {
    expect(downloadPath("support-bundle", "cp 1")).toBe("/api/v1/nodes/cp%201/support-bundle");
    expect(captureQuery({ iface: " eth0 ", seconds: 5, promiscuous: true })).toEqual({ interface: "eth0", duration: "5s", promiscuous: "true" });
    expect(filenameOf('attachment; filename="cp-1-etcd-snapshot-20261202T070000Z.snapshot"', "x")).toBe("cp-1-etcd-snapshot-20261202T070000Z.snapshot");
    expect(filenameOf(null, "fallback")).toBe("fallback");
  });

  it("fetches with the bearer token, renews once on 401 and reads the file name", async () => {
    const calls: { url: string; auth: string }[] = [];
    vi.stubGlobal(
      "fetch",
      vi.fn(async (url: string, init: RequestInit) => {
        const auth = (init.headers as Record<string, string>).Authorization;
        calls.push({ url, auth });
        if (auth === "Bearer old") return new Response("", { status: 401 });
        return new Response(new Uint8Array([0xd4, 0xc3, 0xb2, 0xa1]), { status: 200, headers: { "Content-Disposition": 'attachment; filename="w-1-packet-capture.pcap"' } });
      }),
    );
    const d = fetchDownloader({ accessToken: async () => "old", renew: async () => "new" });
    const got = await d("packet-capture", "w-1", { interface: "eth0", duration: "2s" });
    expect(calls.map((c) => c.auth)).toEqual(["Bearer old", "Bearer new"]);
    expect(calls[1].url).toBe("/api/v1/nodes/w-1/packet-capture?interface=eth0&duration=2s");
    expect(got.filename).toBe("w-1-packet-capture.pcap");
    expect(got.blob.size).toBe(4);
  });

  it("throws the backend's refusal", async () => {
    vi.stubGlobal(
      "fetch",
      vi.fn(async () => new Response(JSON.stringify({ code: 7, message: 'user "ichor:vera" may not download talosclusters/support-bundle' }), { status: 403, headers: { "Content-Type": "application/json" } })),
    );
    const d = fetchDownloader({ accessToken: async () => "t", renew: async () => "t" });
    const err = await d("support-bundle", "w-1").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(String((err as ApiError).message)).toMatch(/may not download talosclusters\/support-bundle/);
  });
});
