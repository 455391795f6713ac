// Small DOM helpers shared by the app pages.

/** A new element with an optional class name and text. */
export function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** Remove the oldest children until at most `max` are left (keeps long sessions' DOM bounded). */
export function trimChildren(container, max) {
  while (container && container.childElementCount > max) container.firstElementChild.remove();
}

/** Run `fn` (which appends), then keep the container scrolled to the end if it was at the end before. */
export function stickToEnd(container, fn) {
  const atEnd = container.scrollHeight - container.scrollTop - container.clientHeight < 32;
  fn();
  if (atEnd) container.scrollTop = container.scrollHeight;
}
