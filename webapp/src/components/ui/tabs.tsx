import { useEffect, useRef } from "preact/hooks";
import { cn } from "./cn";
import { scrollIntoRow } from "../../lib/scroll";

/** Tabs is a tab list of links (each tab has its own URL); arrow keys move between tabs. */
export function Tabs({ tabs, active, hrefOf, label }: { tabs: { id: string; label: string }[]; active: string; hrefOf: (id: string) => string; label: string }) {
  const list = useRef<HTMLDivElement>(null);
  // The selected tab shows on a narrow screen: the list scrolls to it (not the page).
  useEffect(() => {
    scrollIntoRow(list.current, list.current?.querySelector<HTMLElement>("[aria-selected=true]"));
  }, [active]);
  function onKey(e: KeyboardEvent) {
    if (e.key !== "ArrowRight" && e.key !== "ArrowLeft") return;
    const list = (e.currentTarget as HTMLElement).querySelectorAll<HTMLAnchorElement>("[role=tab]");
    const i = Array.from(list).indexOf(document.activeElement as HTMLAnchorElement);
    const next = list[(i + (e.key === "ArrowRight" ? 1 : list.length - 1)) % list.length];
    next?.focus();
    e.preventDefault();
  }
  return (
    <div ref={list} role="tablist" aria-label={label} onKeyDown={onKey} class="flex gap-1 overflow-x-auto border-b">
      {tabs.map((t) => (
        <a
          key={t.id}
          role="tab"
          id={`tab-${t.id}`}
          aria-selected={t.id === active}
          aria-controls="tab-panel"
          tabIndex={t.id === active ? 0 : -1}
          href={hrefOf(t.id)}
          class={cn(
            "-mb-px whitespace-nowrap border-b-2 px-3 py-2 text-sm font-medium",
            t.id === active ? "border-primary text-foreground" : "border-transparent text-muted-foreground hover:text-foreground",
          )}
        >
          {t.label}
        </a>
      ))}
    </div>
  );
}
