import { useEffect, useState } from "preact/hooks";

/** navigate changes the path without a reload. */
export function navigate(to: string, replace = false): void {
  if (replace) history.replaceState(null, "", to);
  else history.pushState(null, "", to);
  dispatchEvent(new PopStateEvent("popstate"));
}

/** usePath is the current location's path, updated on navigation. */
export function usePath(): string {
  const [path, setPath] = useState(location.pathname);
  useEffect(() => {
    const on = () => setPath(location.pathname);
    addEventListener("popstate", on);
    return () => removeEventListener("popstate", on);
  }, []);
  return path;
}

/** Route is a matched screen. */
export type Route =
  | { screen: "overview" }
  | { screen: "nodes" }
  | { screen: "add" }
  | { screen: "node"; name: string; tab: string }
  | { screen: "operations" }
  | { screen: "operation"; name: string }
  | { screen: "settings" }
  | { screen: "callback" }
  | { screen: "missing"; path: string };

/** match maps a path to a screen. */
export function match(path: string): Route {
  const p = path.replace(/\/+$/, "") || "/";
  if (p === "/") return { screen: "overview" };
  if (p === "/nodes") return { screen: "nodes" };
  if (p === "/add-node") return { screen: "add" };
  if (p === "/auth/callback") return { screen: "callback" };
  if (p === "/operations") return { screen: "operations" };
  if (p === "/settings") return { screen: "settings" };
  const op = /^\/operations\/([^/]+)$/.exec(p);
  if (op) return { screen: "operation", name: decodeURIComponent(op[1]) };
  const m = /^\/nodes\/([^/]+)(?:\/([a-z-]+))?$/.exec(p);
  if (m) return { screen: "node", name: decodeURIComponent(m[1]), tab: m[2] ?? "summary" };
  return { screen: "missing", path };
}

