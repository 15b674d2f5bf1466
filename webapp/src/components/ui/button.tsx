import type { ButtonHTMLAttributes, ComponentChildren } from "preact";
import { cn } from "./cn";

/**
 * The button variants: default (Ichor's blue) for the page's main action,
 * outline for the others, ghost for tool buttons, and destructive (red) only
 * for an action that deletes or wipes. src/lib/contrast.test.ts checks their
 * text against their background in both themes.
 */
export const buttonVariants = {
  default: "bg-primary text-primary-foreground hover:opacity-90",
  outline: "border bg-background text-foreground hover:bg-muted",
  ghost: "text-foreground hover:bg-muted",
  destructive: "bg-destructive text-on-destructive hover:opacity-90",
} as const;
const variants = buttonVariants;

/** Two sizes: default for a page's or a form's actions, sm for actions inside a row, a list item or a card's header. */
const sizes = {
  default: "h-9 px-4",
  sm: "h-8 px-3",
  icon: "h-9 w-9",
} as const;

export type ButtonProps = Omit<ButtonHTMLAttributes<HTMLButtonElement>, "size" | "type"> & {
  variant?: keyof typeof variants;
  size?: keyof typeof sizes;
  type?: "button" | "submit";
  disabled?: boolean;
  children?: ComponentChildren;
};

/** Button is shadcn's button on Tailwind. */
export function Button({ variant = "default", size = "default", type = "button", class: cls, ...rest }: ButtonProps) {
  return (
    <button
      type={type}
      class={cn(
        "inline-flex items-center justify-center gap-2 whitespace-nowrap rounded-md text-sm font-medium transition-colors disabled:pointer-events-none disabled:opacity-50 cursor-pointer",
        variants[variant],
        sizes[size],
        cls as string,
      )}
      {...rest}
    />
  );
}

/** LinkButton is an anchor styled as a button. */
export function LinkButton({ variant = "outline", size = "default", class: cls, href, children }: { variant?: keyof typeof variants; size?: keyof typeof sizes; href: string; class?: string; children?: ComponentChildren }) {
  return (
    <a href={href} class={cn("inline-flex items-center justify-center gap-2 whitespace-nowrap rounded-md text-sm font-medium transition-colors", variants[variant], sizes[size], cls)}>
      {children}
    </a>
  );
}
