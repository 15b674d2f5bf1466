import type { ComponentChildren } from "preact";
import { cn } from "./cn";

type P = { class?: string; children?: ComponentChildren; id?: string; "aria-labelledby"?: string };

export function Card({ class: cls, ...rest }: P) {
  return <section class={cn("rounded-lg border bg-card shadow-sm", cls)} {...rest} />;
}
export function CardHeader({ class: cls, ...rest }: P) {
  return <div class={cn("flex flex-col gap-1 p-4 pb-2", cls)} {...rest} />;
}
export function CardTitle({ class: cls, ...rest }: P) {
  return <h2 class={cn("text-base font-semibold leading-tight", cls)} {...rest} />;
}
export function CardDescription({ class: cls, ...rest }: P) {
  return <p class={cn("text-sm text-muted-foreground", cls)} {...rest} />;
}
export function CardContent({ class: cls, ...rest }: P) {
  return <div class={cn("p-4 pt-2", cls)} {...rest} />;
}
