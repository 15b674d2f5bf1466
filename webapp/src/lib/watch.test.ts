import { describe, expect, it } from "vitest";
import { apply, emptySet, sorted } from "./watch";
import { canWrite } from "./status";
import { drain } from "../api/ndjson";
import { refusalsOf } from "../api/errors";

const m = (name: string, extra: object = {}) => ({ name, approval: { state: "approved" }, ...extra });

describe("apply", () => {
  it("builds the snapshot aside and swaps it in at SYNCED, then follows changes", () => {
    let set = emptySet();
    const next = new Map();
    set = apply(set, { type: "EVENT_TYPE_ADDED", machine: m("b"), resumeToken: "1" }, next);
    set = apply(set, { type: "EVENT_TYPE_ADDED", machine: m("a"), resumeToken: "2" }, next);
    expect(set.machines.size).toBe(0);
    set = apply(set, { type: "EVENT_TYPE_SYNCED", resumeToken: "3" }, next);
    expect(set.synced).toBe(true);
    expect(sorted(set).map((x) => x.name)).toEqual(["a", "b"]);
    set = apply(set, { type: "EVENT_TYPE_MODIFIED", machine: m("a", { stage: "running" }), resumeToken: "4" });
    expect(set.machines.get("a")?.stage).toBe("running");
    set = apply(set, { type: "EVENT_TYPE_DELETED", machine: m("b"), resumeToken: "5" });
    expect(sorted(set).map((x) => x.name)).toEqual(["a"]);
    expect(set.token).toBe("5");
  });
});

describe("drain", () => {
  it("parses complete lines and keeps the rest", () => {
    const got: unknown[] = [];
    const rest = drain('{"result":{"a":1}}\n\n{"result":{"a":2}}\n{"res', (v) => got.push(v));
    expect(got).toEqual([{ result: { a: 1 } }, { result: { a: 2 } }]);
    expect(rest).toBe('{"res');
  });
});

describe("status", () => {
  it("hides writes from a viewer only", () => {
    expect(canWrite(["ichor:viewer"])).toBe(false);
    expect(canWrite(["ichor:viewer", "system:authenticated"])).toBe(false);
    expect(canWrite(["ichor:operator"])).toBe(true);
    expect(canWrite(undefined)).toBe(false);
  });
  it("reads RefusalDetails from a status", () => {
    const r = refusalsOf({
      code: 9,
      message: "refused",
      details: [{ "@type": "type.googleapis.com/ichor.v1.RefusalDetails", refusals: [{ field: "spec.role", rule: "quorum", wayOut: "add one first" }] }],
    });
    expect(r).toEqual([{ field: "spec.role", rule: "quorum", wayOut: "add one first" }]);
  });
});
