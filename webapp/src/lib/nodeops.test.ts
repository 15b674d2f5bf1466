import { describe, expect, it } from "vitest";
import type { Machine } from "../api/generated";
import { canStartNodeOperation, canStartShutdown, nodeActions, offersNodeActions } from "./nodeops";

describe("node actions", () => {
  const approved: Machine = { name: "w-1", approval: { state: "approved" } };

  it("are offered to writers on approved machines that are not being removed", () => {
    expect(offersNodeActions(approved, true)).toBe(true);
    expect(offersNodeActions(approved, false)).toBe(false);
    expect(offersNodeActions({ ...approved, deleting: true }, true)).toBe(false);
    expect(offersNodeActions({ name: "m", approval: { state: "pending" } }, true)).toBe(false);
  });

  it("are reboot, shutdown and reset; the last two are destructive", () => {
    expect(nodeActions.map((a) => [a.action, a.destructive])).toEqual([
      ["reboot", false],
      ["shutdown", true],
      ["reset", true],
    ]);
  });

  it("start only on an allowed preview of exactly what is asked, with the name typed when the backend asks for it", () => {
    const reboot = { machine: "w-1", action: "reboot", allowed: true, confirmName: false };
    expect(canStartNodeOperation(reboot, { action: "reboot", wipeMode: "state-ephemeral" }, "", "w-1")).toBe(true);
    expect(canStartNodeOperation(null, { action: "reboot", wipeMode: "" }, "", "w-1")).toBe(false);
    expect(canStartNodeOperation({ ...reboot, allowed: false }, { action: "reboot", wipeMode: "" }, "", "w-1")).toBe(false);
    // A preview of another action (the dialog changed meanwhile) starts nothing.
    expect(canStartNodeOperation(reboot, { action: "reset", wipeMode: "" }, "w-1", "w-1")).toBe(false);

    const reset = { machine: "w-1", action: "reset", wipeMode: "system-disk", allowed: true, confirmName: true };
    expect(canStartNodeOperation(reset, { action: "reset", wipeMode: "system-disk" }, "", "w-1")).toBe(false);
    expect(canStartNodeOperation(reset, { action: "reset", wipeMode: "system-disk" }, "w-2", "w-1")).toBe(false);
    expect(canStartNodeOperation(reset, { action: "reset", wipeMode: "system-disk" }, " w-1 ", "w-1")).toBe(true);
    // The wipe mode shown must be the one previewed.
    expect(canStartNodeOperation(reset, { action: "reset", wipeMode: "all" }, "w-1", "w-1")).toBe(false);
    expect(canStartNodeOperation({ ...reset, wipeMode: "" }, { action: "reset", wipeMode: "state-ephemeral" }, "w-1", "w-1")).toBe(true);
  });

  it("shut the cluster down only when allowed, none unfinished, and its name typed", () => {
    const p = { cluster: "prod", allowed: true };
    expect(canStartShutdown(p, "prod")).toBe(true);
    expect(canStartShutdown(p, "prd")).toBe(false);
    expect(canStartShutdown({ ...p, allowed: false }, "prod")).toBe(false);
    expect(canStartShutdown({ ...p, unfinished: { name: "shutdown-x" } }, "prod")).toBe(false);
    expect(canStartShutdown(null, "prod")).toBe(false);
  });
});
