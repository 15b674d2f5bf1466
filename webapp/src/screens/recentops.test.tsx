// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import type { Operation } from "../api/generated";
import * as api from "../api/v1alpha1";
import { RecentOperations, recent } from "./recentops";

let root: HTMLElement;
beforeEach(() => {
  root = document.createElement("div");
  document.body.appendChild(root);
});
afterEach(() => {
  render(null, root);
  root.remove();
});

const op = (name: string, createdAt: string, phase: string): Operation => ({ name, type: "config", phase, createdAt });

describe("RecentOperations", () => {
  it("lists the newest five first, each linked to its page", () => {
    const ops = [1, 2, 3, 4, 5, 6, 7].map((i) => op(`op-${i}`, `2026-12-01T10:0${i}:00Z`, api.OperationSucceeded));
    expect(recent(ops).map((o) => o.name)).toEqual(["op-7", "op-6", "op-5", "op-4", "op-3"]);
    render(<RecentOperations ops={ops} />, root);
    const links = [...root.querySelectorAll("[data-testid=recent-operations] a")].map((a) => a.getAttribute("href"));
    expect(links).toEqual(["/operations/op-7", "/operations/op-6", "/operations/op-5", "/operations/op-4", "/operations/op-3"]);
  });

  it("says so when no operation ran", () => {
    render(<RecentOperations ops={[]} />, root);
    expect(root.textContent).toContain("No operation has run on this cluster.");
  });
});
