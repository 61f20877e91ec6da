"""The Grad-CAM tab's panels: each one more question asked of the tab's map, with an endpoint of
its own: ``faithfulness`` (``/faithfulness``: does the map point at what the model uses?) and
``trust`` (``/trust``: several methods scored side by side)."""
