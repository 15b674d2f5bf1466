import { describe, expect, it } from "vitest";
import { bytes, isStable, matches, selectorOf, stableKey } from "./disks";

describe("stableKey", () => {
  it("falls back WWID > serial > by-id > bus path > device path", () => {
    const full = { devicePath: "/dev/sda", wwid: "naa.5000", serial: "S1", byId: "ata-X", busPath: "/pci0000:00/0" };
    expect(stableKey(full)).toEqual({ key: "wwid", value: "naa.5000" });
    expect(stableKey({ ...full, wwid: "" })).toEqual({ key: "serial", value: "S1" });
    expect(stableKey({ ...full, wwid: "", serial: "" })).toEqual({ key: "byId", value: "ata-X" });
    expect(stableKey({ ...full, wwid: "", serial: "", byId: "" })).toEqual({ key: "busPath", value: "/pci0000:00/0" });
    const bare = { devicePath: "/dev/vda" };
    expect(stableKey(bare)).toEqual({ key: "devicePath", value: "/dev/vda" });
    expect(isStable("devicePath")).toBe(false);
    expect(stableKey({})).toBeNull();
  });
  it("makes a selector of the one stable key, which matches the disk", () => {
    const d = { devicePath: "/dev/sdb", wwid: "", serial: "SER-9", byId: "ata-Y" };
    expect(selectorOf(d)).toEqual({ serial: "SER-9" });
    expect(matches(selectorOf(d), d)).toBe(true);
    expect(matches({ wwid: "NAA.ABC" }, { wwid: "naa.abc" })).toBe(true);
    expect(matches({ serial: "other" }, d)).toBe(false);
    expect(matches({}, d)).toBe(false);
  });
  it("formats sizes", () => {
    expect(bytes("107374182400")).toBe("100 GiB");
    expect(bytes(1536)).toBe("1.5 KiB");
    expect(bytes(undefined)).toBe("—");
  });
});
