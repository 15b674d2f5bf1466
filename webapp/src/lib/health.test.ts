import { describe, expect, it } from "vitest";
import { apiServersSummary, certificatesSummary, etcdSummary, skewed } from "./health";
import { bytes, kubeConditionTone, uptime } from "./kube";

describe("health figures", () => {
  it("etcd: quorum lost is a problem, a member down with quorum held is a warning", () => {
    const members = [{ id: "a" }, { id: "b" }, { id: "c" }, { id: "d", learner: true }];
    expect(etcdSummary({ etcd: { members, healthy: 3, quorum: 2, hasQuorum: true } })).toMatchObject({ value: "3 / 3", tone: "ok" });
    expect(etcdSummary({ etcd: { members, healthy: 2, quorum: 2, hasQuorum: true } })).toMatchObject({ value: "2 / 3", tone: "warn" });
    const lost = etcdSummary({ etcd: { members, healthy: 1, quorum: 2, hasQuorum: false } });
    expect(lost.tone).toBe("bad");
    expect(lost.detail).toContain("Quorum lost: 1 healthy of 3 voting, 2 needed; 1 learner");
    expect(etcdSummary({ etcd: { error: "no control plane answered" } })).toMatchObject({ tone: "bad", detail: "no control plane answered" });
  });
  it("API servers: names those not ready", () => {
    const f = apiServersSummary({ controlPlanes: [{ machine: "cp-1", apiServerReady: true }, { machine: "cp-2" }] });
    expect(f).toMatchObject({ value: "1 / 2", tone: "warn", detail: "Not ready: cp-2" });
  });
  it("skew: names the nodes off the declared versions", () => {
    expect(skewed({ versionSkew: false, talosVersion: "v1.14.1" }).value).toBe("None");
    expect(skewed({ versionSkew: true, nodes: [{ machine: "w-1", talosVersion: "v1.13.2", skewed: true }] })).toMatchObject({ value: "1 node", detail: "w-1 runs Talos v1.13.2" });
  });
  it("certificates: the earliest expiry, or what status lacks", () => {
    const now = Date.parse("2026-05-01T00:00:00Z");
    expect(certificatesSummary({ certificatesMissing: "not recorded: Kubernetes CA" }, now)).toMatchObject({ value: "Not recorded", tone: "neutral" });
    const soon = certificatesSummary({ certificates: [{ name: "etcd CA", expiresAt: "2036-01-01T00:00:00Z" }, { name: "Talos API CA", expiresAt: "2026-05-11T00:00:00Z" }] }, now);
    expect(soon).toMatchObject({ value: "10 days", tone: "warn" });
    expect(soon.detail).toContain("Talos API CA expires 2026-05-11");
  });
});

describe("kube helpers", () => {
  it("colours Node conditions by meaning", () => {
    expect(kubeConditionTone({ type: "Ready", status: "True" })).toBe("ok");
    expect(kubeConditionTone({ type: "Ready", status: "Unknown" })).toBe("bad");
    expect(kubeConditionTone({ type: "DiskPressure", status: "False" })).toBe("ok");
    expect(kubeConditionTone({ type: "DiskPressure", status: "True" })).toBe("warn");
    expect(kubeConditionTone({ type: "SomethingNew", status: "True" })).toBe("neutral");
  });
  it("prints sizes and uptime", () => {
    expect(bytes(512)).toBe("512 B");
    expect(bytes(1536)).toBe("1.5 KiB");
    expect(bytes(8 * 2 ** 30)).toBe("8.0 GiB");
    const now = Date.parse("2026-05-04T03:00:00Z");
    expect(uptime("2026-05-04T02:48:00Z", now)).toBe("12m");
    expect(uptime("2026-05-04T00:00:00Z", now)).toBe("3h 0m");
    expect(uptime("2026-05-01T00:00:00Z", now)).toBe("3d 3h");
    expect(uptime(undefined, now)).toBe("—");
  });
});
