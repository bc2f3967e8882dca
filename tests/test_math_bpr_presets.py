"""FPL presets and the closed-form CCE / TCC (fedsim.math.fpl_presets)."""

from __future__ import annotations

import pytest

from fedsim.math.fpl_presets import (
    PRESET_NAMES,
    cce_formula,
    fpl_preset,
    fpl_presets,
    table4_tcc,
)

# ML100K temporal split (users with > 20 interactions): |U| = 911, X+ = 79,855, |I| = 1,682
N_USERS, X_PLUS, N_ITEMS = 911, 79_855, 1_682


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_rpe_times_clients_is_x_plus(name):
    p = fpl_preset(name, N_USERS, X_PLUS)
    assert p.rounds_per_epoch * p.clients_per_round == pytest.approx(X_PLUS)


def test_preset_table():
    ps = fpl_presets(N_USERS, X_PLUS)
    assert list(ps) == list(PRESET_NAMES)
    assert (ps["sFPL"].clients_per_round, ps["sFPL"].triples_per_client, ps["sFPL"].rounds_per_epoch) == (1, 1.0, X_PLUS)
    assert ps["sFPL+"].clients_per_round == 1
    assert ps["sFPL+"].triples_per_client == pytest.approx(X_PLUS / N_USERS)
    assert ps["pFPL"].clients_per_round == N_USERS and ps["pFPL"].triples_per_client == 1.0
    assert ps["pFPL"].rounds_per_epoch == pytest.approx(X_PLUS / N_USERS)
    assert ps["pFPL+"].triples_per_client == pytest.approx(X_PLUS / N_USERS)
    # a "+" epoch processes T times the triples of its plain twin
    assert ps["pFPL+"].triples_per_epoch == pytest.approx(X_PLUS * X_PLUS / N_USERS)
    assert ps["sFPL"].triples_per_epoch == pytest.approx(X_PLUS)


def test_text_definition_keeps_x_plus_triples_per_epoch():
    for p in fpl_presets(N_USERS, X_PLUS, definition="text").values():
        assert p.triples_per_epoch == pytest.approx(X_PLUS)
    assert fpl_preset("sFPL+", N_USERS, X_PLUS, "text").triples_per_client == X_PLUS
    assert fpl_preset("pFPL+", N_USERS, X_PLUS, "text").rounds_per_epoch == 1.0


def test_schedules_round_and_floor():
    p = fpl_preset("pFPL+", N_USERS, X_PLUS)  # X+/|U| = 87.656
    s = p.schedule()
    assert (s.rounds_per_epoch, s.clients_per_round, s.triples_per_client) == (88, N_USERS, 88)
    f = p.schedule("floor")
    assert (f.rounds_per_epoch, f.triples_per_client) == (87, 87)
    assert fpl_preset("sFPL", N_USERS, X_PLUS).schedule().rounds_per_epoch == X_PLUS
    # the integer schedule's closed form stays within 1% of the exact one on ML100K
    for name in PRESET_NAMES:
        q = fpl_preset(name, N_USERS, X_PLUS)
        for rounding in ("round", "floor"):
            assert q.schedule(rounding).cce(N_ITEMS, 0.5) == pytest.approx(q.cce(N_ITEMS, 0.5), rel=0.01)
    with pytest.raises(ValueError):
        p.schedule("ceil")


def test_exact_vector_count_of_a_schedule():
    s = fpl_preset("sFPL+", N_USERS, X_PLUS).schedule()
    # rpe |U^-| (|I| + T) + positives actually sent
    assert s.vectors_per_epoch(N_ITEMS, 1234) == X_PLUS * (N_ITEMS + 88) + 1234
    # its mean at rate pi is the closed form
    mean_pos = s.client_visits_per_epoch * s.triples_per_client * 0.3
    assert s.vectors_per_epoch(N_ITEMS, 0) + mean_pos == pytest.approx(s.cce(N_ITEMS, 0.3))


def test_cce_formula():
    assert cce_formula(10, 3, 100, 5, 0.2) == 10 * 3 * (100 + 5 * 1.2)
    with pytest.raises(ValueError):
        cce_formula(1, 1, 1, 1, 1.5)
    with pytest.raises(ValueError):
        fpl_preset("FPL", 10, 100)


# Table 4 of the paper (Brazil), TCC x 1e-12, pi = 0.1 ... 1.0
TABLE4 = {
    "sFPL": (45, [1.27623, 1.27623, 1.27624, 1.27624, 1.27624, 1.27624, 1.27625, 1.27625, 1.27625, 1.27625]),
    "sFPL+": (50, [1.41913, 1.41924, 1.41934, 1.41944, 1.41955, 1.41965, 1.41975, 1.41985, 1.41996, 1.42006]),
    "pFPL": (45, [1.27623, 1.27623, 1.27624, 1.27624, 1.27624, 1.27624, 1.27625, 1.27625, 1.27625, 1.27625]),
    "pFPL+": (35, [0.99339, 0.99347, 0.99354, 0.99361, 0.99368, 0.99375, 0.99383, 0.99390, 0.99397, 0.99404]),
}


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_reproduces_all_of_table4(name):
    epochs, values = TABLE4[name]
    for k, printed in enumerate(values, start=1):
        assert round(table4_tcc(name, k / 10, epochs) * 1e-12, 5) == pytest.approx(printed, abs=1.01e-5)


def test_text_definition_cannot_reproduce_table4():
    assert table4_tcc("pFPL+", 0.8, 35, definition="text") * 1e-12 < 0.05  # printed: 0.99390
