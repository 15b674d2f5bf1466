import { render } from "preact";
import "./index.css";
import { App } from "./app";
import { applyTheme, storedTheme } from "./lib/theme";
import { navigate } from "./lib/router";

applyTheme(storedTheme());
matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => applyTheme(storedTheme()));
render(<App />, document.getElementById("app")!);

// Same-origin links navigate inside the app (no reload, no new sign-in).
document.addEventListener("click", (e) => {
  const a = (e.target as Element | null)?.closest?.("a");
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const href = a.getAttribute("href");
  if (!href || !href.startsWith("/") || href.startsWith("//") || href.startsWith("/oidc") || a.target) return;
  e.preventDefault();
  navigate(href);
});
