import { describe, expect, it } from "vitest";
import { canConfirm, isIP, reclaimFinished, reclaimTone, reclaimable, uuidMatches } from "./reclaim";

describe("reclaimable", () => {
  it("lists only AlreadyConfigured addresses, once, sorted", () => {
    expect(
      reclaimable([
        { address: "10.0.0.9", result: "AlreadyConfigured" },
        { address: "10.0.0.2", result: "Pending" },
        { address: "10.0.0.3", result: "AlreadyConfigured" },
        { address: "10.0.0.9", result: "AlreadyConfigured" },
      ]),
    ).toEqual(["10.0.0.3", "10.0.0.9"]);
    expect(reclaimable(undefined)).toEqual([]);
  });
});

describe("phases", () => {
  it("knows the terminal phases", () => {
    expect(reclaimFinished({ phase: "Done" })).toBe(true);
    expect(reclaimFinished({ phase: "Expired" })).toBe(true);
    expect(reclaimFinished({ phase: "Resetting" })).toBe(false);
    expect(reclaimFinished(undefined)).toBe(false);
  });
  it("colours a refused reclaim as bad", () => {
    expect(reclaimTone({ phase: "AwaitingConfirmation", inspection: { refusals: ["spec.address: an Ichor machine"] } })).toBe("bad");
    expect(reclaimTone({ phase: "AwaitingConfirmation" })).toBe("warn");
    expect(reclaimTone({ phase: "Done" })).toBe("ok");
  });
  it("offers the confirmation only when the reset may go ahead", () => {
    const r = { phase: "AwaitingConfirmation", inspection: { uuid: "abc" } };
    expect(canConfirm(r)).toBe(true);
    expect(canConfirm({ ...r, confirmed: true })).toBe(false);
    expect(canConfirm({ ...r, inspection: { uuid: "abc", refusals: ["x"] } })).toBe(false);
    expect(canConfirm({ phase: "Inspecting" })).toBe(false);
  });
});

describe("uuidMatches", () => {
  it("ignores case and spaces, and refuses an empty UUID", () => {
    expect(uuidMatches("  ABC-def ", "abc-def")).toBe(true);
    expect(uuidMatches("abc-de", "abc-def")).toBe(false);
    expect(uuidMatches("", undefined)).toBe(false);
  });
});

describe("isIP", () => {
  it("accepts addresses and refuses names and ports", () => {
    expect(isIP("192.168.1.20")).toBe(true);
    expect(isIP("fd00::5")).toBe(true);
    expect(isIP("192.168.1.256")).toBe(false);
    expect(isIP("node-1.example")).toBe(false);
    expect(isIP("10.0.0.1:50000")).toBe(false);
  });
});
