"""Show only some rows of the script (Render ▸ Show Only Failed Lines): the other rows of the editor are hidden,
not removed, so the text, its undo history and its saves stay whole; turning the filter off shows every row."""

from __future__ import annotations

from collections.abc import Collection

from PySide6.QtWidgets import QPlainTextEdit


def show_only_rows(editor: QPlainTextEdit, rows: Collection[int] | None) -> int:
    """Hide every text row (0-based) of `editor` but `rows` (None: show them all); how many rows are shown."""
    document = editor.document()
    block, shown, changed = document.firstBlock(), 0, False
    while block.isValid():
        visible = rows is None or block.blockNumber() in rows
        shown += visible
        if block.isVisible() != visible:
            block.setVisible(visible)
            changed = True
        block = block.next()
    if changed:
        document.markContentsDirty(0, document.characterCount())
        editor.viewport().update()
        editor.update()
    return shown
