"""The cast's flow layout: the height its rows need at a width is worked out once until a row changes (Qt asks for
it many times in one relayout of the window), and follows every change of its rows."""

from __future__ import annotations

from PySide6.QtCore import QRect
from PySide6.QtWidgets import QPushButton, QWidget

from s2studio.ui.script.flow_layout import FlowLayout


def test_the_height_at_a_width_is_worked_out_once_until_a_row_changes(qtbot):
    host = QWidget()
    qtbot.addWidget(host)
    flow = FlowLayout(host)
    buttons = [QPushButton(f"Speaker {i}") for i in range(20)]
    for button in buttons:
        flow.addWidget(button)
    host.show()
    tall = flow.heightForWidth(300)
    arranged = flow.arranged
    assert [flow.heightForWidth(300) for _ in range(20)] == [tall] * 20 and flow.arranged == arranged
    assert flow.heightForWidth(150) > tall and flow.arranged == arranged + 1  # another width: measured
    buttons[0].setText("A speaker with a much longer name than the others")  # a row's size changed
    assert flow.heightForWidth(300) > tall
    longer = flow.heightForWidth(300)
    flow.addWidget(QPushButton("One more speaker"))
    assert flow.heightForWidth(300) >= longer and flow.arranged == arranged + 3
    before = flow.heightForWidth(300)
    for button in buttons[1:]:  # rows hidden: the height follows
        button.hide()
    assert flow.heightForWidth(300) == flow._arrange(QRect(0, 0, 300, 0), move=False) < before
