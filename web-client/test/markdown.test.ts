import assert from "node:assert/strict";
import { test } from "node:test";
import { highlight, renderMarkdown } from "../src/render/markdown";

test("headings, lists and code blocks become HTML", () => {
  const html = renderMarkdown("# Title\n\n- one\n- two\n\n```python\nprint('hi')\n```\n");
  assert.match(html, /<h1>Title<\/h1>/);
  assert.match(html, /<li>one<\/li>/);
  assert.match(html, /<code class="language-python"><span class="hljs-built_in">print<\/span>/);
});

test("raw HTML from the model is escaped, never passed through", () => {
  const html = renderMarkdown('<img src=x onerror="alert(1)"> and <script>alert(2)</script>');
  assert.doesNotMatch(html, /<img|<script/);
  assert.match(html, /&lt;img src=x onerror=/);
});

test("javascript: links are not made into links", () => {
  const html = renderMarkdown("[click](javascript:alert(1))");
  assert.doesNotMatch(html, /href="javascript/);
});

test("links open in a new tab without a referrer", () => {
  const html = renderMarkdown("[docs](https://example.test/a)");
  assert.match(html, /<a href="https:\/\/example.test\/a" target="_blank" rel="noopener noreferrer">/);
});

test("code in an unknown language is escaped, not highlighted", () => {
  assert.equal(highlight("<b>x</b>", "klingon"), "&#60;b&#62;x&#60;/b&#62;");
  assert.match(highlight("ls -la", "sh"), /ls/);
});
