import { describe, expect, it } from "vitest";
import { canAdmin, canPause, canResume, current, fromTo, machineTone, phaseText, phaseTone, settingsUpdate } from "./operations";
import { match } from "./router";

describe("current", () => {
  it("is the newest operation that has not finished", () => {
    const ops = [
      { name: "c", phase: "Succeeded" },
      { name: "b", phase: "Paused" },
      { name: "a", phase: "Running" },
    ];
    expect(current(ops)?.name).toBe("b");
    expect(current([{ name: "x", phase: "Failed" }])).toBeUndefined();
    expect(current(undefined)).toBeUndefined();
    // An operation the controller has not picked up yet has no phase: pending.
    expect(current([{ name: "new" }])?.name).toBe("new");
  });
});

describe("phase", () => {
  it("says when a pause is asked and not reached yet", () => {
    expect(phaseText({ phase: "Running", paused: true })).toBe("Running (pausing)");
    expect(phaseText({ phase: "Paused", paused: true })).toBe("Paused");
    expect(phaseText({})).toBe("Pending");
    expect(phaseText({ phase: "Succeeded", paused: true })).toBe("Succeeded");
  });
  it("tones a failed step as bad and a person's pause as a warning", () => {
    expect(phaseTone({ phase: "Paused", failureReason: "w-1 did not come back" })).toBe("bad");
    expect(phaseTone({ phase: "Paused", paused: true })).toBe("warn");
    expect(phaseTone({ phase: "Succeeded" })).toBe("ok");
    expect(phaseTone({ phase: "Running" })).toBe("neutral");
  });
});

describe("pause and resume", () => {
  it("offers pause while running and resume when paused or stopped on a failed step", () => {
    expect(canPause({ phase: "Running" })).toBe(true);
    expect(canResume({ phase: "Running" })).toBe(false);
    expect(canPause({ phase: "Running", paused: true })).toBe(false);
    expect(canResume({ phase: "Running", paused: true })).toBe(true);
    expect(canResume({ phase: "Paused", failureReason: "x" })).toBe(true);
    expect(canPause({ phase: "Paused", failureReason: "x" })).toBe(true);
    for (const phase of ["Succeeded", "Failed"]) {
      expect(canPause({ phase })).toBe(false);
      expect(canResume({ phase, paused: true })).toBe(false);
    }
  });
});

describe("fromTo", () => {
  it("shows what is known", () => {
    expect(fromTo({ from: "v1.14.0", to: "v1.14.1" })).toBe("v1.14.0 → v1.14.1");
    expect(fromTo({ to: "v1.14.1" })).toBe("→ v1.14.1");
    expect(fromTo({})).toBe("—");
  });
});

describe("canAdmin", () => {
  it("is for ichor:admin and groups Ichor does not know, never viewers or operators", () => {
    expect(canAdmin(["ichor:admin"])).toBe(true);
    expect(canAdmin(["ichor:viewer"])).toBe(false);
    expect(canAdmin(["ichor:operator", "system:authenticated"])).toBe(false);
    expect(canAdmin(["platform-admins"])).toBe(true);
    expect(canAdmin(undefined)).toBe(false);
  });
});

describe("settingsUpdate", () => {
  const read = { idTokenLifetime: "15m", refreshTokenLifetime: "", defaultDriftPolicy: "AutoCorrect", resourceVersion: "42" };
  it("is undefined when nothing changed", () => {
    expect(settingsUpdate(read, { idTokenLifetime: "15m", refreshTokenLifetime: "", defaultDriftPolicy: "AutoCorrect" })).toBeUndefined();
    expect(settingsUpdate(read, { idTokenLifetime: " 15m ", refreshTokenLifetime: " ", defaultDriftPolicy: "AutoCorrect" })).toBeUndefined();
  });
  it("sets what changed, clears what was emptied, and carries the resourceVersion read", () => {
    expect(settingsUpdate(read, { idTokenLifetime: "", refreshTokenLifetime: "24h", defaultDriftPolicy: "AutoCorrect" })).toEqual({
      clear: ["id_token_lifetime"],
      refreshTokenLifetime: "24h",
      resourceVersion: "42",
    });
    expect(settingsUpdate(read, { idTokenLifetime: "15m", refreshTokenLifetime: "", defaultDriftPolicy: "Warn" })).toEqual({
      defaultDriftPolicy: "Warn",
      resourceVersion: "42",
    });
  });
});

describe("routes", () => {
  it("matches the operations and settings screens", () => {
    expect(match("/operations")).toEqual({ screen: "operations" });
    expect(match("/operations/")).toEqual({ screen: "operations" });
    expect(match("/operations/upgrade-talos%201")).toEqual({ screen: "operation", name: "upgrade-talos 1" });
    expect(match("/settings")).toEqual({ screen: "settings" });
  });
});

describe("machineTone", () => {
  it("tones a machine's state in an operation: done ok, failed bad, in progress and held warn, the rest neutral", () => {
    expect(machineTone("Done")).toBe("ok");
    expect(machineTone("Failed")).toBe("bad");
    expect(machineTone("InProgress")).toBe("warn");
    expect(machineTone("Held")).toBe("warn");
    expect(machineTone("Pending")).toBe("neutral");
    expect(machineTone("Skipped")).toBe("neutral");
    expect(machineTone(undefined)).toBe("neutral");
  });
});
