/** Loading says a read is under way, while it is. */
export function Loading({ when }: { when: boolean }) {
  return when ? (
    <p role="status" data-loading="" class="text-sm text-muted-foreground">
      Loading…
    </p>
  ) : null;
}
