import { describe, expect, it } from "vitest";
import { errorOf } from "./transport";

describe("errorOf", () => {
  it("reads a unary call's status", async () => {
    const e = await errorOf(new Response(JSON.stringify({ code: 5, message: "machine w-1 not found" }), { status: 404 }));
    expect(e.message).toBe("machine w-1 not found");
    expect(e.code).toBe(5);
  });

  it("reads the status of a stream that failed before its first message", async () => {
    // grpc-gateway answers a failed server stream with {"error": status}.
    const body = JSON.stringify({ error: { code: 3, message: 'service "etcd" has no log on a worker' } });
    const e = await errorOf(new Response(body, { status: 400 }));
    expect(e.message).toBe('service "etcd" has no log on a worker');
    expect(e.code).toBe(3);
  });

  it("names the status and reason when the body says nothing (HTTP/2 has no reason phrase)", async () => {
    const e = await errorOf(new Response("", { status: 400 }));
    expect(e.message).toBe("ichor-ui answered 400 Bad Request");
  });

  it("keeps a proxy's text, without its markup", async () => {
    const e = await errorOf(new Response("<html><body><h1>502 Bad Gateway</h1>upstream connect error</body></html>", { status: 502 }));
    expect(e.message).toBe("502 Bad Gateway: 502 Bad Gateway upstream connect error");
  });
});
