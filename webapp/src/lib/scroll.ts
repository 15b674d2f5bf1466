/** scrollIntoRow scrolls a sideways-scrolling row (the navigation, a tab list) so that el shows whole, without scrolling the page. */
export function scrollIntoRow(row: HTMLElement | null | undefined, el: HTMLElement | null | undefined): void {
  if (!row || !el || row.scrollWidth <= row.clientWidth) return;
  const left = el.getBoundingClientRect().left - row.getBoundingClientRect().left + row.scrollLeft;
  if (left < row.scrollLeft || left + el.offsetWidth > row.scrollLeft + row.clientWidth) {
    row.scrollLeft = Math.max(0, left - (row.clientWidth - el.offsetWidth) / 2);
  }
}
