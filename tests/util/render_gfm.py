"""Render Markdown from stdin to HTML on stdout with GitHub's CommonMark+GFM
(cmarkgfm: tables, autolinks, strikethrough, tag filter), as a real
renderer would, for the tests that check what a page can link or mention."""

import sys

import cmarkgfm
from cmarkgfm.cmark import Options

sys.stdout.write(
    cmarkgfm.github_flavored_markdown_to_html(sys.stdin.read(), options=Options.CMARK_OPT_UNSAFE)
)
