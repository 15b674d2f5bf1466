import type { ComponentChildren } from "preact";
import { cn } from "./cn";

type P = { class?: string; children?: ComponentChildren };

/**
 * Table is a table on a wide screen and a list of cards below 640 px (the
 * "stack" rules of index.css): each row a card, each cell its column's label
 * and value, so that nothing is clipped or scrolls sideways on a phone. The
 * roles are explicit because a table laid out as blocks loses them in some
 * browsers. Give each TD its column's label.
 */
export function Table({ class: cls, children, label }: P & { label: string }) {
  return (
    <div class="w-full sm:overflow-x-auto">
      <table role="table" aria-label={label} class={cn("stack w-full caption-bottom text-sm", cls)}>
        {children}
      </table>
    </div>
  );
}
export function THead({ children }: P) {
  return (
    <thead role="rowgroup" class="border-b text-left text-xs uppercase tracking-wide text-muted-foreground">
      {children}
    </thead>
  );
}
export function TBody({ children }: P) {
  return (
    <tbody role="rowgroup" class="divide-y">
      {children}
    </tbody>
  );
}
export function TR({ children, class: cls, ...rest }: P & { "data-machine"?: string; "data-operation"?: string }) {
  return (
    <tr role="row" class={cn("hover:bg-muted/40", cls)} {...rest}>
      {children}
    </tr>
  );
}
export function TH({ children, class: cls, sort }: P & { sort?: "ascending" | "descending" | "none" }) {
  return (
    <th role="columnheader" scope="col" aria-sort={sort} class={cn("px-3 py-2 font-medium whitespace-nowrap", cls)}>
      {children}
    </th>
  );
}
/** TD is a cell; label is its column's name, shown beside the value when the table is a card list. */
export function TD({ children, class: cls, label, ...rest }: P & { label: string; "data-col"?: string }) {
  return (
    <td role="cell" data-label={label} class={cn("px-3 py-2 align-top", cls)} {...rest}>
      <div class="cell contents">{children}</div>
    </td>
  );
}
