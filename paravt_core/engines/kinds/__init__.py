"""The engine kinds, one module each (its config class and its ``build``); ``engines.registry`` lists them."""
