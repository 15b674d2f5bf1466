import { describe, expect, it } from "vitest";
import { match, pageKey, pageTitle } from "./router";

describe("pageTitle", () => {
  it("names the page and the cluster in every title", () => {
    expect(pageTitle(match("/"), "prod")).toBe("Overview · prod · Ichor");
    expect(pageTitle(match("/nodes"), "prod")).toBe("Nodes · prod · Ichor");
    expect(pageTitle(match("/add-node"), "prod")).toBe("Add node · prod · Ichor");
    expect(pageTitle(match("/nodes/cp-1"), "prod")).toBe("cp-1 · prod · Ichor");
    expect(pageTitle(match("/nodes/cp-1/talos"), "prod")).toBe("cp-1 · Talos · prod · Ichor");
    expect(pageTitle(match("/nodes/cp-1/logs"), "prod")).toBe("cp-1 · Logs · prod · Ichor");
    expect(pageTitle(match("/operations/up-1"), "prod")).toBe("Operation up-1 · prod · Ichor");
    expect(pageTitle(match("/settings"))).toBe("Settings · Ichor");
    expect(pageTitle(match("/configuration"), "prod")).toBe("Configuration · prod · Ichor");
    expect(pageTitle(match("/cilium"), "prod")).toBe("Cilium · prod · Ichor");
    expect(pageTitle(match("/configuration/new"), "prod")).toBe("New patch · Configuration · prod · Ichor");
    expect(match("/configuration/patches/a%20b")).toEqual({ screen: "configuration", edit: "a b" });
    expect(pageTitle(match("/nope"))).toBe("No such page · Ichor");
  });
});

describe("pageKey", () => {
  it("is the same for the tabs of one node and differs between nodes and screens", () => {
    expect(pageKey(match("/nodes/cp-1"))).toBe(pageKey(match("/nodes/cp-1/talos")));
    expect(pageKey(match("/nodes/cp-1"))).not.toBe(pageKey(match("/nodes/cp-2")));
    expect(pageKey(match("/nodes"))).not.toBe(pageKey(match("/")));
  });
});
