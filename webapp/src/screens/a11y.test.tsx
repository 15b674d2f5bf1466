// @vitest-environment happy-dom
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { render } from "preact";
import { act } from "preact/test-utils";
import type { Client, Cluster, Machine } from "../api/generated";
import * as api from "../api/v1alpha1";
import { ConsoleContext, type Console } from "../context";
import { connectionOf } from "../lib/connection";
import { match } from "../lib/router";
import { AddNode } from "./addnode";
import { Shell } from "./shell";

const pending: Machine = { name: "m-10-5-0-9", address: "10.5.0.9", approval: { state: api.ApprovalPending }, hardware: { disks: [] } };
const cluster: Cluster = {
  name: "prod",
  ready: "True",
  discovery: {
    addresses: ["10.5.0.9", "10.5.0.20"],
    results: [
      { address: "10.5.0.9", result: api.DiscoveryResultPending, machine: "m-10-5-0-9" },
      { address: "10.5.0.20", result: api.DiscoveryResultAlreadyConfigured, message: "configured by another cluster" },
    ],
  },
};

let root: HTMLElement;
beforeEach(() => {
  root = document.createElement("div");
  document.body.appendChild(root);
});
afterEach(() => {
  render(null, root);
  root.remove();
});

async function settle() {
  for (let i = 0; i < 5; i++) {
    await act(async () => {
      await new Promise((r) => setTimeout(r, 0));
    });
  }
}

function consoleOf(groups: string[]): Console {
  return {
    client: {} as Client,
    me: { username: "ada", groups },
    cluster,
    clusterError: null,
    refreshCluster: () => {},
    machines: [pending],
    synced: true,
    live: true,
    watchError: null,
    connection: connectionOf({ now: Date.now(), lastBeat: Date.now(), watchLive: true }),
    canWrite: true,
  };
}

async function show(ctx: Console, node: preact.ComponentChildren) {
  await act(() => {
    render(<ConsoleContext.Provider value={ctx}>{node}</ConsoleContext.Provider>, root);
  });
  await settle();
}

describe("Add node", () => {
  it("puts the machines waiting for approval first, then Register, then the reset collapsed", async () => {
    await show(consoleOf(["ichor:admin"]), <AddNode />);
    const headings = [...root.querySelectorAll("h2")].map((h) => h.textContent?.trim());
    const first = headings.findIndex((h) => h === "Waiting for approval (1)");
    const register = headings.findIndex((h) => h === "Register machines");
    const reset = headings.findIndex((h) => h === "Machine configured by another cluster");
    expect(first, headings.join(" | ")).toBe(0);
    expect(register).toBeGreaterThan(first);
    expect(reset).toBeGreaterThan(register);
    expect(root.querySelector<HTMLDetailsElement>("section[aria-labelledby=reclaim-title] details")?.open).toBe(false);
  });

  it("opens the reset with the address of the discovery row that found the machine", async () => {
    await show(consoleOf(["ichor:admin"]), <AddNode />);
    const button = root.querySelector<HTMLButtonElement>('[data-testid="reclaim-10.5.0.20"]');
    expect(button, "a Reset and add… button on the AlreadyConfigured row").not.toBeNull();
    expect(root.querySelector('[data-testid="reclaim-10.5.0.9"]'), "no button on a pending row").toBeNull();
    await act(() => button!.click());
    await settle();
    expect(root.querySelector<HTMLDetailsElement>("section[aria-labelledby=reclaim-title] details")?.open).toBe(true);
    expect(root.querySelector<HTMLSelectElement>("#reclaim-address")?.value).toBe("10.5.0.20");
  });

  it("offers no reset to an operator", async () => {
    await show(consoleOf(["ichor:operator"]), <AddNode />);
    expect(root.querySelector("[data-testid^=reclaim-]")).toBeNull();
    expect(root.querySelector("#reclaim-title")).toBeNull();
  });

  it("ties a form error to its field: aria-invalid, aria-describedby, focus", async () => {
    await show(consoleOf(["ichor:operator"]), <AddNode />);
    const input = root.querySelector<HTMLInputElement>("#disc-addresses")!;
    expect(input.getAttribute("aria-invalid")).toBeNull();
    await act(() => root.querySelector<HTMLFormElement>("#disc-addresses")!.form!.requestSubmit());
    await settle();
    expect(input.getAttribute("aria-invalid")).toBe("true");
    const ids = (input.getAttribute("aria-describedby") ?? "").split(" ");
    const texts = ids.map((id) => document.getElementById(id)?.textContent);
    expect(texts).toContain("Give at least one address or subnet.");
    expect(document.activeElement).toBe(input);
  });
});

describe("Shell", () => {
  it("starts with a skip link to the main content and titles the page", async () => {
    await show(
      consoleOf(["ichor:admin"]),
      <Shell route={match("/nodes")} onSignOut={() => {}}>
        <h1>Nodes</h1>
      </Shell>,
    );
    const firstLink = root.querySelector("a, button");
    expect(firstLink?.textContent).toBe("Skip to content");
    expect(firstLink?.getAttribute("href")).toBe("#main");
    expect(root.querySelector("main#main")).not.toBeNull();
    expect(document.title).toBe("Nodes · prod · Ichor");
  });

  it("says Connecting… on the first load and the time of the data when ichor-ui stops answering", async () => {
    const ctx = consoleOf(["ichor:admin"]);
    await show({ ...ctx, connection: connectionOf({ now: 0, lastBeat: 0, watchLive: false }) }, <Shell route={match("/")} onSignOut={() => {}}>{null}</Shell>);
    expect(root.querySelector("[data-testid=connection]")?.textContent).toBe("Connecting…");
    const beat = Date.parse("2026-12-01T12:00:00Z");
    const lost = connectionOf({ now: beat + 60_000, lastBeat: beat, watchLive: true, error: "ichor-ui did not answer (Failed to fetch)" });
    await show({ ...ctx, connection: lost }, <Shell route={match("/")} onSignOut={() => {}}>{null}</Shell>);
    expect(root.querySelector("[data-testid=connection]")?.getAttribute("data-state")).toBe("lost");
    expect(root.querySelector("[data-testid=stale]")?.textContent).toContain("Failed to fetch");
    // The cluster's health stays what it was, marked as old, not "Unreachable".
    expect(root.querySelector("[data-testid=health]")?.textContent).toBe("Healthy");
  });

  it("opens the navigation as a menu from its button", async () => {
    await show(consoleOf(["ichor:admin"]), <Shell route={match("/settings")} onSignOut={() => {}}>{null}</Shell>);
    const button = root.querySelector<HTMLButtonElement>("[data-testid=menu]")!;
    const nav = root.querySelector<HTMLElement>("#main-nav")!;
    expect(button.getAttribute("aria-expanded")).toBe("false");
    expect(nav.classList.contains("hidden")).toBe(true);
    await act(() => button.click());
    expect(button.getAttribute("aria-expanded")).toBe("true");
    expect(nav.classList.contains("hidden")).toBe(false);
    expect(nav.querySelector("[aria-current=page]")?.textContent).toBe("Settings");
  });
});
