"""Published facts about the public DTR traces (the eight logs of the DTR paper).

The logs ship zipped as `simrd/logs.zip` in the public `uwsampl/dtr-prototype`
repository. The hashes let `dtrf traces import` and `dtrf traces fetch` verify
that a copy is byte-for-byte the published one.
"""

from __future__ import annotations

# SHA-256 of each public log, by file name.
KNOWN_TRACE_SHA256: dict[str, str] = {
    "inceptionv4-64-10000000000.0-2020-10-1-10-55-0-default.log":
        "439a2b9a7a080faabfbc2c751d66d2838664882e3b603196d1c2f41ac64ee9df",
    "lstm-128-11000000000.0-2020-10-1-16-38-52-default.log":
        "f17c569c87bcd1368cc1d1eb0ad79cc75ac8eea0985755c6cd437d7faff2a31f",
    "resnet32-56-9000000000.0-2020-10-1-13-3-30-default.log":
        "38c94cada99aca654ad9589d99eabc2267a51835593b598085f9f8221a7bacaf",
    "transformer-10-8000000000.0-2020-10-1-10-56-5-default.log":
        "cdcac0e9f4af95ccf30cacb28f9edcc2f194c31653946f9ddde424f926fcb7d1",
    "treelstm-6-8000000000.0-2020-10-1-12-54-1-default.log":
        "4ec05ef5a1bd81a0c47a4eb13fa708e015333c2568c26f8cdfa1e8c9f2de5902",
    "tv_densenet121-84-10000000000.0-2020-10-1-13-41-18-default.log":
        "4d9e8bd06f6b76c894dfbef4743f714177665dee9e883aa245c2770fe48e45de",
    "unet-6-8000000000.0-2020-10-1-10-57-18-default.log":
        "cf985d2ca964c89988e931ee1978302deb22ffb17bc518da0f39344b66d23476",
    "unroll_gan-512-10000000000.0-2020-10-1-18-43-42-default.log":
        "0947d26a48e6677b6d437b1415245aa7bb1c638207e8420e4a1e52a094137120",
}

# The archive holding all eight logs; they are extracted by file name, whatever
# folder they sit in inside it.
LOGS_ZIP_SHA256 = "63579a07a6e7ce063f5ba49450dfb96a9f3995df736c423c27e1336f4365e02a"
LOGS_ZIP_URLS = (
    # Pinned to a commit that has the archive, then the default branch.
    "https://raw.githubusercontent.com/uwsampl/dtr-prototype/"
    "7f50d996b7432980dbe969281f215b08a5baf913/simrd/logs.zip",
    "https://raw.githubusercontent.com/uwsampl/dtr-prototype/master/simrd/logs.zip",
)

# Short names of the public traces (the part of the file name before the first
# '-'), and the other spellings users type for them.
PUBLIC_TRACE_NAMES = (
    "resnet32", "lstm", "inceptionv4", "transformer", "treelstm", "tv_densenet121",
    "unet", "unroll_gan",
)
TRACE_ALIASES = {
    "densenet121": "tv_densenet121",
    "densenet": "tv_densenet121",
    "gan": "unroll_gan",
}
