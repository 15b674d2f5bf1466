import { cloneElement, isValidElement, type ComponentChildren, type InputHTMLAttributes, type LabelHTMLAttributes, type SelectHTMLAttributes, type TextareaHTMLAttributes, type VNode } from "preact";
import { cn } from "./cn";

const field = "flex h-9 w-full rounded-md border bg-background px-3 py-1 text-sm placeholder:text-muted-foreground disabled:opacity-50 aria-invalid:border-destructive";

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

/**
 * Field is a label, a control, an optional hint and an optional error, tied
 * together by id: the control gets aria-describedby (hint and error) and
 * aria-invalid when there is an error, so a screen reader reads why.
 */
export function Field({ id, label, hint, error, children, class: cls }: { id: string; label: string; hint?: ComponentChildren; error?: string; children: ComponentChildren; class?: string }) {
  const describedBy = [hint ? `${id}-hint` : "", error ? `${id}-error` : ""].filter(Boolean).join(" ") || undefined;
  const control = isValidElement(children)
    ? cloneElement(children as VNode<Record<string, unknown>>, { "aria-describedby": describedBy, "aria-invalid": error ? true : undefined })
    : children;
  return (
    <div class={cn("flex flex-col gap-1.5", cls)}>
      <Label for={id}>{label}</Label>
      {control}
      {hint && (
        <p id={`${id}-hint`} class="text-xs text-muted-foreground">
          {hint}
        </p>
      )}
      {error && (
        <p id={`${id}-error`} class="text-xs font-medium text-destructive-foreground" data-testid="field-error">
          {error}
        </p>
      )}
    </div>
  );
}

/** focusFirst moves focus to the first of the ids that has an error, after the errors render. */
export function focusFirst(errors: Record<string, string>, order: string[]): void {
  const id = order.find((k) => errors[k]);
  if (id) requestAnimationFrame(() => document.getElementById(id)?.focus());
}

export function Checkbox({ id, label, checked, onChange, error }: { id: string; label: ComponentChildren; checked: boolean; onChange: (e: { currentTarget: HTMLInputElement }) => void; error?: string }) {
  return (
    <div class="flex flex-col gap-1">
      <div class="flex items-center gap-2">
        <input
          id={id}
          type="checkbox"
          class="h-4 w-4 accent-[var(--primary)]"
          checked={checked}
          onChange={onChange}
          aria-invalid={error ? true : undefined}
          aria-describedby={error ? `${id}-error` : undefined}
        />
        <label for={id} class="text-sm">
          {label}
        </label>
      </div>
      {error && (
        <p id={`${id}-error`} class="text-xs font-medium text-destructive-foreground" data-testid="field-error">
          {error}
        </p>
      )}
    </div>
  );
}
