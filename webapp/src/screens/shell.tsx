import type { ComponentChildren } from "preact";
import { useState } from "preact/hooks";
import { useConsole } from "../context";
import type { Route } from "../lib/router";
import { applyTheme, storedTheme, type Theme } from "../lib/theme";
import { Badge } from "../components/ui/badge";
import { Button } from "../components/ui/button";
import { cn } from "../components/ui/cn";
import { describe } from "../api/errors";

function Health() {
  const { cluster, clusterError } = useConsole();
  if (clusterError) return <Badge tone="bad" title={describe(clusterError)}>Unreachable</Badge>;
  if (!cluster) return <Badge>…</Badge>;
  const tone = cluster.ready === "True" ? "ok" : cluster.ready === "False" ? "bad" : "warn";
  const text = cluster.ready === "True" ? "Healthy" : cluster.ready === "False" ? "Unhealthy" : "Unknown";
  return (
    <Badge tone={tone} title={cluster.readyMessage}>
      <span data-testid="health">{text}</span>
    </Badge>
  );
}

function ThemeToggle() {
  const [theme, setTheme] = useState<Theme>(storedTheme());
  const next: Record<Theme, Theme> = { system: "dark", dark: "light", light: "system" };
  return (
    <Button
      variant="ghost"
      size="sm"
      data-testid="theme"
      aria-label={`Colour theme: ${theme}. Switch to ${next[theme]}.`}
      onClick={() => {
        applyTheme(next[theme]);
        setTheme(next[theme]);
      }}
    >
      {theme === "dark" ? "☾ Dark" : theme === "light" ? "☀ Light" : "◐ Auto"}
    </Button>
  );
}

const nav = [
  { href: "/", label: "Overview", screens: ["overview"] },
  { href: "/nodes", label: "Nodes", screens: ["nodes", "node"] },
  { href: "/add-node", label: "Add node", screens: ["add"] },
  { href: "/operations", label: "Operations", screens: ["operations", "operation"] },
  { href: "/settings", label: "Settings", screens: ["settings"] },
];

export function Shell({ route, onSignOut, children }: { route: Route; onSignOut: () => void; children: ComponentChildren }) {
  const { cluster, me, live, synced } = useConsole();
  return (
    <div class="min-h-screen">
      <header class="border-b bg-card">
        <div class="mx-auto flex max-w-7xl flex-wrap items-center gap-x-4 gap-y-2 px-4 py-2">
          <a href="/" class="flex items-center gap-2 font-semibold">
            <span aria-hidden="true" class="inline-block h-5 w-5 rounded bg-primary" />
            <span data-testid="cluster-name">{cluster?.name ?? "…"}</span>
          </a>
          <Health />
          <dl class="flex flex-wrap gap-x-3 text-xs text-muted-foreground" aria-label="Versions">
            <div class="flex gap-1">
              <dt>Talos</dt>
              <dd class="font-mono text-foreground">{cluster?.talosVersion || "—"}</dd>
            </div>
            <div class="flex gap-1">
              <dt>Kubernetes</dt>
              <dd class="font-mono text-foreground">{cluster?.kubernetesVersion || "—"}</dd>
            </div>
            <div class="flex gap-1">
              <dt>Ichor</dt>
              <dd class="font-mono text-foreground">{cluster?.ichorVersion || "—"}</dd>
            </div>
          </dl>
          <div class="ml-auto flex items-center gap-2">
            <span class="sr-only" role="status">
              {live ? "Live updates on" : synced ? "Live updates reconnecting" : "Connecting"}
            </span>
            <span aria-hidden="true" title={live ? "Live" : "Reconnecting"} class={cn("h-2 w-2 rounded-full", live ? "bg-ok" : "bg-warn")} />
            <ThemeToggle />
            <span class="max-w-40 truncate text-sm" data-testid="user" title={me?.groups?.join(", ")}>
              {me?.username ?? ""}
            </span>
            <Button variant="outline" size="sm" onClick={onSignOut} data-testid="sign-out">
              Sign out
            </Button>
          </div>
        </div>
        <nav aria-label="Main" class="mx-auto flex max-w-7xl gap-1 overflow-x-auto px-2">
          {nav.map((n) => {
            const active = n.screens.includes(route.screen);
            return (
              <a
                key={n.href}
                href={n.href}
                aria-current={active ? "page" : undefined}
                class={cn("-mb-px border-b-2 px-3 py-2 text-sm font-medium whitespace-nowrap", active ? "border-primary" : "border-transparent text-muted-foreground hover:text-foreground")}
              >
                {n.label}
              </a>
            );
          })}
        </nav>
      </header>
      <main class="mx-auto flex max-w-7xl flex-col gap-4 p-4">{children}</main>
    </div>
  );
}
