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
  | { screen: "users" }
  | { screen: "backups" }
  | { screen: "cilium" }
  | { screen: "configuration"; edit?: string }
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
  if (p === "/users") return { screen: "users" };
  if (p === "/backups") return { screen: "backups" };
  if (p === "/cilium") return { screen: "cilium" };
  if (p === "/configuration") return { screen: "configuration" };
  if (p === "/configuration/new") return { screen: "configuration", edit: "" };
  const cp = /^\/configuration\/patches\/([^/]+)$/.exec(p);
  if (cp) return { screen: "configuration", edit: decodeURIComponent(cp[1]) };
  const op = /^\/operations\/([^/]+)$/.exec(p);
  if (op) return { screen: "operation", name: decodeURIComponent(op[1]) };
  const m = /^\/nodes\/([^/]+)(?:\/([a-z-]+))?$/.exec(p);
  if (m) return { screen: "node", name: decodeURIComponent(m[1]), tab: m[2] ?? "summary" };
  return { screen: "missing", path };
}


const tabTitles: Record<string, string> = { storage: "Storage & network", talos: "Talos", kubernetes: "Kubernetes & etcd", config: "Configuration", logs: "Logs" };

/** pageTitle is the document title of a route: the page, the cluster, Ichor. */
export function pageTitle(route: Route, cluster?: string): string {
  let page: string;
  switch (route.screen) {
    case "overview":
    case "callback":
      page = "Overview";
      break;
    case "nodes":
      page = "Nodes";
      break;
    case "add":
      page = "Add node";
      break;
    case "node":
      page = tabTitles[route.tab] ? `${route.name} · ${tabTitles[route.tab]}` : route.name;
      break;
    case "operations":
      page = "Operations";
      break;
    case "operation":
      page = `Operation ${route.name}`;
      break;
    case "settings":
      page = "Settings";
      break;
    case "users":
      page = "Users";
      break;
    case "backups":
      page = "Backups";
      break;
    case "cilium":
      page = "Cilium";
      break;
    case "configuration":
      page = route.edit === undefined ? "Configuration" : route.edit === "" ? "New patch · Configuration" : `Patch ${route.edit} · Configuration`;
      break;
    default:
      page = "No such page";
  }
  return [page, cluster, "Ichor"].filter(Boolean).join(" · ");
}

/** pageKey names the page a route shows, without the node page's tab: focus moves to the heading when it changes, not on a tab change. */
export function pageKey(route: Route): string {
  switch (route.screen) {
    case "node":
    case "operation":
      return `${route.screen}/${route.name}`;
    case "configuration":
      return route.edit === undefined ? "configuration" : `configuration/${route.edit}`;
    case "missing":
      return `missing/${route.path}`;
    case "callback":
      return "overview";
    default:
      return route.screen;
  }
}
