"""Published figures, printed beside measured ones in reports (never used as results)."""

# FedRec (Lin et al. 2020) Table 2, MovieLens 100K: (MAE, MAE std, RMSE, RMSE std)
FEDREC_TABLE2_ML100K = {
    ("PMF(B)", "unfederated"): (0.7418, 0.0046, 0.9424, 0.0059),
    ("PMF(B)", "federated"): (0.7418, 0.0048, 0.9424, 0.0064),
    ("PMF(S)", "unfederated"): (0.7497, 0.0043, 0.9551, 0.0054),
    ("PMF(S)", "federated"): (0.7498, 0.0042, 0.9553, 0.0051),
    ("SVD++(S)", "unfederated"): (0.7215, 0.0034, 0.9228, 0.0049),
    ("SVD++(S)", "federated"): (0.7221, 0.0035, 0.9233, 0.0050),
}

# FedRec Figure 2 / authors' logs, ML100K RMSE with user averaging for rho = 1, 2, 3
FEDREC_UA_RMSE_ML100K = {
    "PMF(B)": (0.9710, 0.9843, 0.9920),
    "PMF(S)": (0.9709, 0.9839, 0.9915),
    "SVD++(S)": (0.9423, 0.9558, 0.9649),
}
# hybrid filling, ML100K RMSE for rho = 1, 2, 3 with the authors' (T_predict, T_local)
FEDREC_HF_RMSE_ML100K = {
    "PMF(B)": (0.9432, 0.9431, 0.9431),
    "PMF(S)": (0.9425, 0.9427, 0.9428),
    "SVD++(S)": (0.9185, 0.9194, 0.9201),
}
FEDREC_HF_SETTINGS = {  # (T_predict, T_local) per rho = 1, 2, 3
    "PMF(B)": ((10, 10), (5, 15), (5, 15)),
    "PMF(S)": ((5, 15), (5, 5), (5, 10)),
    "SVD++(S)": ((15, 15), (5, 15), (10, 15)),
}
"""FedRec++ published figures (ML100K), printed beside measured ones."""

# Table 2, ML100K: (algorithm, rho) -> (MAE, RMSE)
FEDRECPP_TABLE2_ML100K = {
    ("FedRec", 0): (0.7418, 0.9424), ("FedRec", 1): (0.7440, 0.9432), ("FedRec++", 1): (0.7417, 0.9422),
    ("FedRec", 2): (0.7445, 0.9431), ("FedRec++", 2): (0.7422, 0.9430),
    ("FedRec", 3): (0.7447, 0.9431), ("FedRec++", 3): (0.7416, 0.9421),
}
# Table 2, ML1M and NF5K5K (the paper's text labels ML1M's FedRec rho = 3 row "2" and NF5K5K's
# FedRec++ rho = 2 row "4": read by position, rows alternate FedRec / FedRec++ for rho = 1, 2, 3)
FEDRECPP_TABLE2 = {
    "ML100K": FEDRECPP_TABLE2_ML100K,
    "ML1M": {
        ("FedRec", 0): (0.7193, 0.9106), ("FedRec", 1): (0.7217, 0.9129), ("FedRec++", 1): (0.7198, 0.9113),
        ("FedRec", 2): (0.7239, 0.9152), ("FedRec++", 2): (0.7195, 0.9109),
        ("FedRec", 3): (0.7263, 0.9178), ("FedRec++", 3): (0.7196, 0.9109),
    },
    "NF5K5K": {
        ("FedRec", 0): (0.7139, 0.9090), ("FedRec", 1): (0.7148, 0.9102), ("FedRec++", 1): (0.7137, 0.9088),
        ("FedRec", 2): (0.7152, 0.9104), ("FedRec++", 2): (0.7137, 0.9089),
        ("FedRec", 3): (0.7160, 0.9110), ("FedRec++", 3): (0.7138, 0.9090),
    },
}
# Table 3, ML100K, units (80-byte latent vectors) per iteration: eta label -> (denoiser, ordinary, client)
FEDRECPP_TABLE3_ML100K = {
    "0": (0, 170, 170), "1": (81550, 254, 258), "n/4": (571, 256, 350), "n/2": (251, 256, 294),
}
