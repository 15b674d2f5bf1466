import type { ComponentChildren, InputHTMLAttributes, LabelHTMLAttributes, SelectHTMLAttributes, TextareaHTMLAttributes } from "preact";
import { cn } from "./cn";

const field = "flex h-9 w-full rounded-md border bg-background px-3 py-1 text-sm placeholder:text-muted-foreground disabled:opacity-50";

export function Input({ class: cls, ...rest }: InputHTMLAttributes<HTMLInputElement>) {
  return <input class={cn(field, cls as string)} {...rest} />;
}

export function Textarea({ class: cls, ...rest }: TextareaHTMLAttributes<HTMLTextAreaElement>) {
  return <textarea class={cn(field, "h-auto min-h-16 py-2", cls as string)} {...rest} />;
}

export function Select({ class: cls, ...rest }: SelectHTMLAttributes<HTMLSelectElement>) {
  return <select class={cn(field, "pr-8", cls as string)} {...rest} />;
}

export function Label({ class: cls, ...rest }: LabelHTMLAttributes<HTMLLabelElement>) {
  return <label class={cn("text-sm font-medium leading-none", cls as string)} {...rest} />;
}

/** Field is a label, a control and an optional hint, tied together by id. */
export function Field({ id, label, hint, children, class: cls }: { id: string; label: string; hint?: ComponentChildren; children: ComponentChildren; class?: string }) {
  return (
    <div class={cn("flex flex-col gap-1.5", cls)}>
      <Label for={id}>{label}</Label>
      {children}
      {hint && (
        <p id={`${id}-hint`} class="text-xs text-muted-foreground">
          {hint}
        </p>
      )}
    </div>
  );
}

export function Checkbox({ id, label, checked, onChange }: { id: string; label: ComponentChildren; checked: boolean; onChange: (e: { currentTarget: HTMLInputElement }) => void }) {
  return (
    <div class="flex items-center gap-2">
      <input id={id} type="checkbox" class="h-4 w-4 accent-[var(--primary)]" checked={checked} onChange={onChange} />
      <label for={id} class="text-sm">
        {label}
      </label>
    </div>
  );
}
