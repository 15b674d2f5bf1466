import type { ComponentChildren } from "preact";
import { useEffect, useRef } from "preact/hooks";

/** Dialog is a modal <dialog>: focus moves into it, Escape closes it. */
export function Dialog({ open, onClose, title, description, children }: { open: boolean; onClose: () => void; title: string; description?: ComponentChildren; children: ComponentChildren }) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const d = ref.current;
    if (!d) return;
    if (open && !d.open) d.showModal();
    if (!open && d.open) d.close();
  }, [open]);
  return (
    <dialog
      ref={ref}
      aria-labelledby="dialog-title"
      onClose={onClose}
      onCancel={onClose}
      class="m-auto w-[min(32rem,calc(100vw-2rem))] rounded-lg border bg-card p-0 text-foreground shadow-lg backdrop:bg-black/50"
    >
      {open && (
        <div class="flex flex-col gap-3 p-5">
          <h2 id="dialog-title" class="text-lg font-semibold">
            {title}
          </h2>
          {description && <div class="text-sm text-muted-foreground">{description}</div>}
          {children}
        </div>
      )}
    </dialog>
  );
}
