import type { ComponentChildren } from "preact";
import { cn } from "./cn";

type P = { class?: string; children?: ComponentChildren };

/** Table scrolls sideways inside its own box on narrow screens. */
export function Table({ class: cls, children, label }: P & { label: string }) {
  return (
    <div class="w-full overflow-x-auto">
      <table aria-label={label} class={cn("w-full caption-bottom text-sm", cls)}>
        {children}
      </table>
    </div>
  );
}
export function THead({ children }: P) {
  return <thead class="border-b text-left text-xs uppercase tracking-wide text-muted-foreground">{children}</thead>;
}
export function TBody({ children }: P) {
  return <tbody class="divide-y">{children}</tbody>;
}
export function TR({ children, class: cls, ...rest }: P & { "data-machine"?: string; "data-operation"?: string }) {
  return (
    <tr class={cn("hover:bg-muted/40", cls)} {...rest}>
      {children}
    </tr>
  );
}
export function TH({ children, class: cls }: P) {
  return (
    <th scope="col" class={cn("px-3 py-2 font-medium whitespace-nowrap", cls)}>
      {children}
    </th>
  );
}
export function TD({ children, class: cls, ...rest }: P & { "data-col"?: string }) {
  return (
    <td class={cn("px-3 py-2 align-top", cls)} {...rest}>
      {children}
    </td>
  );
}
