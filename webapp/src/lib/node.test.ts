import { describe, expect, it } from "vitest";
import type { Machine } from "../api/generated";
import * as api from "../api/v1alpha1";
import { activeTab, canRemove, configEntryMatches, isControlPlane, networkText, nodeTabs, selectorText, serviceHealth, conditionTone, tabHref } from "./node";

describe("node tabs", () => {
  it("opens the tab the address names, the summary for an unknown one", () => {
    for (const t of nodeTabs) expect(activeTab(t.id)).toBe(t.id);
    expect(activeTab("")).toBe("summary");
    expect(activeTab("bogus")).toBe("summary");
  });
  it("addresses the summary as the node itself and the others below it, the name escaped", () => {
    expect(tabHref("cp-1", "summary")).toBe("/nodes/cp-1");
    expect(tabHref("cp-1", "talos")).toBe("/nodes/cp-1/talos");
    expect(tabHref("a b/c", "config")).toBe("/nodes/a%20b%2Fc/config");
  });
});

describe("canRemove", () => {
  const approved: Machine = { name: "w-1", approval: { state: api.ApprovalApproved } };
  it("offers removal of an approved machine to a writer", () => {
    expect(canRemove(approved, true)).toBe(true);
  });
  it("does not offer it to a viewer, for a machine not approved, or one already being deleted", () => {
    expect(canRemove(approved, false)).toBe(false);
    expect(canRemove({ ...approved, approval: { state: api.ApprovalPending } }, true)).toBe(false);
    expect(canRemove({ ...approved, approval: { state: api.ApprovalRejected } }, true)).toBe(false);
    expect(canRemove({ name: "x" }, true)).toBe(false);
    expect(canRemove({ ...approved, deleting: true }, true)).toBe(false);
  });
});

describe("node details", () => {
  it("asks only a control plane for etcd members", () => {
    expect(isControlPlane({ role: api.RoleControlPlane })).toBe(true);
    expect(isControlPlane({ role: api.RoleWorker })).toBe(false);
    expect(isControlPlane({})).toBe(false);
  });
  it("tones a condition's status: True ok, False bad, else neutral", () => {
    // By meaning, not by True/False: a healthy worker shows no red badge.
    expect(conditionTone({ type: api.ReadyCondition, status: "True" })).toBe("ok");
    expect(conditionTone({ type: api.ReadyCondition, status: "False" })).toBe("bad");
    expect(conditionTone({ type: api.DriftedCondition, status: "False" })).toBe("ok");
    expect(conditionTone({ type: api.DriftedCondition, status: "True" })).toBe("warn");
    expect(conditionTone({ type: api.IdentityConflictCondition, status: "False" })).toBe("ok");
    expect(conditionTone({ type: api.ReadyCondition, status: "Unknown" })).toBe("bad");
    expect(conditionTone({ type: api.SecureBootCondition, status: "False" })).toBe("neutral");
  });
  it("writes a disk selector as its set key=value", () => {
    expect(selectorText({ serial: "S1" })).toBe("serial=S1");
    expect(selectorText({ wwid: "", byId: "ata-X" })).toBe("byId=ata-X");
    expect(selectorText({})).toBeUndefined();
    expect(selectorText(undefined)).toBeUndefined();
  });
  it("says how the primary NIC is configured", () => {
    expect(networkText({ macAddress: "aa", dhcp: true })).toBe("DHCP");
    expect(networkText({ macAddress: "aa", dhcp: true, vlan: 12 })).toBe("DHCP, VLAN 12");
    expect(networkText({ dhcp: false, addresses: ["10.0.0.5/24", "10.0.1.5/24"], gateway: "10.0.0.1" })).toBe("static 10.0.0.5/24, 10.0.1.5/24 via 10.0.0.1");
    expect(networkText({ addresses: ["10.0.0.5/24"] })).toBe("static 10.0.0.5/24 via —");
  });
  it("shows a service's health, unknown before healthy, with the message of an unhealthy one", () => {
    expect(serviceHealth({ healthUnknown: true, healthy: true })).toEqual({ text: "unknown", tone: "neutral" });
    expect(serviceHealth({ healthy: true })).toEqual({ text: "healthy", tone: "ok" });
    expect(serviceHealth({ healthy: false, healthMessage: "probe failed" })).toEqual({ text: "unhealthy", tone: "bad", title: "probe failed" });
  });
  it("filters effective-config entries by document, field and origin, without case", () => {
    const e = { kind: "v1alpha1", documentName: "", field: "machine.install.disk", originLayer: "role", originPatch: "workers-disk" };
    expect(configEntryMatches(e, "")).toBe(true);
    expect(configEntryMatches(e, "MACHINE.install")).toBe(true);
    expect(configEntryMatches(e, "workers-disk")).toBe(true);
    expect(configEntryMatches(e, "role")).toBe(true);
    expect(configEntryMatches(e, "cluster.network")).toBe(false);
  });
});
