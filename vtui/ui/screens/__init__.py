"""vtui's screens: dashboard, instance detail, logs, flag editor, presets, layout dialogs, help, quit."""
