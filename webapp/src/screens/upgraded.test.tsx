// @vitest-environment happy-dom
import { describe, expect, it } from "vitest";
import type { Client, Cluster } from "../api/generated";
import { match } from "../lib/router";
import { click, consoleOf, show, useRoot } from "../testing/dom";
import { Shell } from "./shell";

const at = (ichorVersion: string): Cluster => ({ name: "prod", ready: "True", talosVersion: "v1.14.1", kubernetesVersion: "1.37.2", ichorVersion });

describe("Shell and an Ichor upgrade", () => {
  const root = useRoot();
  let reloads = 0;
  const page = (cluster: Cluster | null) =>
    show(root(), consoleOf({} as Client, ["ichor:admin"], { cluster }), (
      <Shell route={match("/")} onSignOut={() => {}} reload={() => reloads++}>
        {null}
      </Shell>
    ));
  const versions = () => root().querySelector("[aria-label=Versions]")?.textContent;
  const banner = () => root().querySelector("[data-testid=upgraded]")?.textContent;

  it("shows the Ichor version and no banner while ichor-ui keeps the release the page loaded with", async () => {
    await page(null);
    await page(at("v0.6.1"));
    expect(versions()).toContain("Ichorv0.6.1");
    await page(at("v0.6.1"));
    expect(banner()).toBeUndefined();
  });

  it("prompts a reload once ichor-ui reports another release, and keeps prompting while the replicas roll", async () => {
    reloads = 0;
    await page(at("v0.6.1"));
    await page(at("v0.7.0"));
    expect(versions()).toContain("Ichorv0.7.0");
    expect(banner()).toContain("console of Ichor v0.6.1");
    expect(banner()).toContain("console of v0.7.0");
    // An old replica answers the next read: the page is still stale.
    await page(at("v0.6.1"));
    expect(banner()).toContain("v0.7.0");
    await click(root(), "[data-testid=reload]");
    expect(reloads).toBe(1);
  });

  it("does not prompt when ichor-ui does not report its version", async () => {
    await page(at(""));
    await page(at("v0.6.1"));
    expect(banner()).toBeUndefined();
  });
});
