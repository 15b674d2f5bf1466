import type { ComponentChildren } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { useConsole } from "../context";
import { pageKey, pageTitle, type Route } from "../lib/router";
import { applyTheme, storedTheme, type Theme } from "../lib/theme";
import { clock } from "../lib/connection";
import { scrollIntoRow } from "../lib/scroll";
import { Badge } from "../components/ui/badge";
import { Button } from "../components/ui/button";
import { Alert } from "../components/ui/alert";
import { cn } from "../components/ui/cn";

/** Health is the cluster's Ready condition as last read: the backend's link is told apart, by Connection. */
function Health() {
  const { cluster, connection } = useConsole();
  if (!cluster) return null;
  const stale = connection.state === "lost";
  const tone = stale ? "neutral" : cluster.ready === "True" ? "ok" : cluster.ready === "False" ? "bad" : "warn";
  const text = cluster.ready === "True" ? "Healthy" : cluster.ready === "False" ? "Unhealthy" : "Health unknown";
  return (
    <Badge tone={tone}>
      <span data-testid="health">{text}</span>
      {stale && <span class="ml-1 font-normal">(as of {clock(connection.asOf)})</span>}
    </Badge>
  );
}

/** Connection is the live dot and its words: how current the data is. */
function Connection() {
  const { connection } = useConsole();
  const dot = { ok: "bg-ok", warn: "bg-warn", bad: "bg-destructive", neutral: "bg-muted-foreground" }[connection.tone];
  return (
    <span class="flex items-center gap-1.5 text-xs text-muted-foreground" data-testid="connection" data-state={connection.state}>
      <span aria-hidden="true" class={cn("inline-block h-2 w-2 shrink-0 rounded-full", dot, connection.state === "connecting" && "animate-pulse")} />
      <span role="status">{connection.text}</span>
    </span>
  );
}

function ThemeToggle() {
  const [theme, setTheme] = useState<Theme>(storedTheme());
  const next: Record<Theme, Theme> = { system: "dark", dark: "light", light: "system" };
  const label: Record<Theme, string> = { system: "Auto", dark: "Dark", light: "Light" };
  return (
    <Button
      variant="ghost"
      size="sm"
      data-testid="theme"
      onClick={() => {
        applyTheme(next[theme]);
        setTheme(next[theme]);
      }}
    >
      <span aria-hidden="true">{theme === "dark" ? "☾" : theme === "light" ? "☀" : "◐"}</span>
      <span>
        <span class="sr-only">Colour theme: </span>
        {label[theme]}
        <span class="sr-only">; switch to {label[next[theme]].toLowerCase()}</span>
      </span>
    </Button>
  );
}

const nav = [
  { href: "/", label: "Overview", screens: ["overview", "callback"] },
  { href: "/nodes", label: "Nodes", screens: ["nodes", "node"] },
  { href: "/add-node", label: "Add node", screens: ["add"] },
  { href: "/operations", label: "Operations", screens: ["operations", "operation"] },
  { href: "/backups", label: "Backups", screens: ["backups"] },
  { href: "/configuration", label: "Configuration", screens: ["configuration"] },
  { href: "/cilium", label: "Cilium", screens: ["cilium"] },
  { href: "/settings", label: "Settings", screens: ["settings"] },
  { href: "/users", label: "Users", screens: ["users"] },
];

/** navFor is the navigation of a person: Users only for one of Ichor's own users (ichor:<name>), who exist only while they are on. */
export function navFor(username: string | undefined) {
  return nav.filter((n) => n.href !== "/users" || (username ?? "").startsWith("ichor:"));
}

/** StaleBanner says that ichor-ui does not answer, since when the data is, and why. */
function StaleBanner() {
  const { connection } = useConsole();
  if (connection.state !== "lost") return null;
  return (
    <Alert tone="warn" title={connection.asOf ? `ichor-ui does not answer: what you see is from ${clock(connection.asOf)}` : "ichor-ui does not answer"}>
      <span data-testid="stale">
        {connection.cause ?? "No answer."} The console tries again every few seconds; the cluster itself may be fine.
      </span>
    </Alert>
  );
}

/**
 * UpgradedBanner prompts a reload once ichor-ui reports another Ichor release
 * than the one that served this page. The page is the SPA embedded in the
 * ichor-ui binary, so the version of its first cluster read is the page's
 * own. The banner stays once shown: during a rollout the old and the new
 * replicas answer in turn, and the page is stale either way.
 */
export function UpgradedBanner({ reload = () => location.reload() }: { reload?: () => void }) {
  const { cluster } = useConsole();
  const loaded = useRef("");
  const upgraded = useRef("");
  const current = cluster?.ichorVersion ?? "";
  if (current && !loaded.current) loaded.current = current;
  if (current && current !== loaded.current) upgraded.current = current;
  if (!upgraded.current) return null;
  return (
    <Alert tone="warn" title={`Ichor now runs ${upgraded.current}`}>
      <p data-testid="upgraded">
        This page is the console of Ichor {loaded.current}, loaded before the upgrade; reload it to use the console of {upgraded.current}.
      </p>
      <Button variant="outline" size="sm" class="mt-2" data-testid="reload" onClick={reload}>
        Reload
      </Button>
    </Alert>
  );
}

export function Shell({
  route,
  onSignOut,
  reload,
  children,
}: {
  route: Route;
  onSignOut: () => void;
  /** reload reloads the page; tests replace it. */
  reload?: () => void;
  children: ComponentChildren;
}) {
  const { cluster, me } = useConsole();
  const [menu, setMenu] = useState(false);
  const navRef = useRef<HTMLElement>(null);
  const key = pageKey(route);
  const first = useRef(true);
  const title = pageTitle(route, cluster?.name);

  useEffect(() => {
    document.title = title;
  }, [title]);

  // A new page: close the menu, show its item, and move focus to its heading
  // (not on the first page: the browser starts there).
  useEffect(() => {
    setMenu(false);
    scrollIntoRow(navRef.current, navRef.current?.querySelector<HTMLElement>("[aria-current=page]") ?? null);
    if (first.current) {
      first.current = false;
      return;
    }
    const f = requestAnimationFrame(() => {
      const h = document.querySelector<HTMLElement>("#main h1") ?? document.getElementById("main");
      if (!h) return;
      if (h.tabIndex < 0 || !h.hasAttribute("tabindex")) h.tabIndex = -1;
      h.focus();
    });
    return () => cancelAnimationFrame(f);
  }, [key]);

  return (
    <div class="min-h-screen">
      <a href="#main" class="sr-only rounded-md bg-primary px-3 py-2 text-sm font-medium text-primary-foreground focus:not-sr-only focus:absolute focus:left-2 focus:top-2 focus:z-50">
        Skip to content
      </a>
      <header class="border-b bg-card">
        <div class="mx-auto flex max-w-7xl flex-wrap items-center gap-x-4 gap-y-2 px-4 py-2">
          <a href="/" class="flex min-w-0 items-center gap-2 font-semibold">
            <span aria-hidden="true" class="inline-block h-5 w-5 shrink-0 rounded bg-primary" />
            <span class="break-all" data-testid="cluster-name">
              {cluster?.name ?? "…"}
            </span>
          </a>
          <Health />
          <Connection />
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
          <div class="ml-auto flex flex-wrap items-center gap-2">
            <ThemeToggle />
            <span class="text-sm break-all" data-testid="user">
              {me?.username ?? ""}
            </span>
            <Button variant="outline" size="sm" onClick={onSignOut} data-testid="sign-out">
              Sign out
            </Button>
            <Button variant="outline" size="sm" class="sm:hidden" aria-expanded={menu} aria-controls="main-nav" data-testid="menu" onClick={() => setMenu(!menu)}>
              {menu ? "Close menu" : "Menu"}
            </Button>
          </div>
        </div>
        <nav
          id="main-nav"
          ref={navRef}
          aria-label="Main"
          class={cn("mx-auto max-w-7xl gap-1 px-2 sm:flex sm:flex-row sm:overflow-x-auto", menu ? "flex flex-col pb-2" : "hidden")}
          onKeyDown={(e) => {
            if (e.key === "Escape" && menu) {
              setMenu(false);
              document.querySelector<HTMLElement>("[data-testid=menu]")?.focus();
            }
          }}
        >
          {navFor(me?.username).map((n) => {
            const active = n.screens.includes(route.screen);
            return (
              <a
                key={n.href}
                href={n.href}
                aria-current={active ? "page" : undefined}
                class={cn(
                  "whitespace-nowrap px-3 py-2 text-sm font-medium",
                  "border-l-2 sm:-mb-px sm:border-b-2 sm:border-l-0",
                  active ? "border-primary text-foreground" : "border-transparent text-muted-foreground hover:text-foreground",
                )}
              >
                {n.label}
              </a>
            );
          })}
        </nav>
      </header>
      <main id="main" tabIndex={-1} class="mx-auto flex max-w-7xl flex-col gap-4 p-4 outline-none">
        <UpgradedBanner reload={reload} />
        <StaleBanner />
        {children}
      </main>
    </div>
  );
}
