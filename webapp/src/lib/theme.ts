const key = "ichor.theme";

/** Theme is the user's choice; "system" follows prefers-color-scheme. */
export type Theme = "light" | "dark" | "system";

export function storedTheme(): Theme {
  const t = localStorage.getItem(key);
  return t === "light" || t === "dark" ? t : "system";
}

/** applyTheme sets the dark class on <html>. */
export function applyTheme(t: Theme): void {
  if (t === "system") localStorage.removeItem(key);
  else localStorage.setItem(key, t);
  const dark = t === "dark" || (t === "system" && matchMedia("(prefers-color-scheme: dark)").matches);
  document.documentElement.classList.toggle("dark", dark);
}
