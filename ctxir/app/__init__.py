"""The ctxir Gradio app; ``app.py`` at the repository root is its entry point.

Each ``*_tab.py`` holds its views' logic (functions over an ``AppState`` returning a ``ViewResult``, tested without
a server) and ``build(ui)``, whose callbacks call that logic; ``blocks.py`` composes the tabs into one ``gr.Blocks``
and ``gradio_fixes.py`` holds every workaround of Gradio. Nothing is imported here: ``state`` needs no gradio.
"""
